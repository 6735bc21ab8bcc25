package conf

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// An Error is one problem with a configuration, located as precisely as the source allows.
type Error struct {
	// File is the file name given to Parse or Load; "" for a Config built in code.
	File string
	// Line is the 1-based line in File; 0 when unknown (a default, or a Config built in
	// code).
	Line int
	// Field is the YAML path, e.g. "listeners[1].type"; "" for the file as a whole.
	Field string
	// Msg says what is wrong, without the file, line or field.
	Msg string
}

// Error formats the problem as file:line: field: message, leaving out the parts it lacks.
func (e Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one configuration, so the operator fixes them in one
// pass instead of one per restart. Parse, Load, Validate, Reloadable, CheckExposure and
// CheckClusterExposure return it.
type Errors struct {
	// List holds the problems in file order, those without a line last.
	List []Error
}

// Error prints one problem per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, err := range e.List {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes each problem to errors.Is and errors.As: `var e conf.Error;
// errors.As(err, &e)` finds the first.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.List))
	for i, err := range e.List {
		errs[i] = err
	}
	return errs
}

// errorList collects problems; err returns them as an error, or nil when there are none.
type errorList []Error

func (l *errorList) add(field, format string, args ...any) {
	*l = append(*l, Error{Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (l errorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return &Errors{List: l}
}

// sortByLine orders problems as they appear in the file, keeping the order of problems
// on one line, and puts those without a line last.
func (l errorList) sortByLine() {
	slices.SortStableFunc(l, func(a, b Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Line, b.Line)
	})
}
