package auth

import (
	"errors"
	"fmt"
)

// A FileError is one problem with a password or ACL file line.
type FileError struct {
	File string
	Line int // 1-based; 0 for the file as a whole
	Msg  string
}

// Error formats the problem as file:line: message.
func (e *FileError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// fileErrors collects a file's problems, so that the operator fixes them in one pass.
type fileErrors struct {
	file string
	errs []error
}

func (f *fileErrors) add(line int, format string, args ...any) {
	f.errs = append(f.errs, &FileError{File: f.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// err returns every problem, one per line, or nil; errors.As finds each *FileError.
func (f *fileErrors) err() error { return errors.Join(f.errs...) }
