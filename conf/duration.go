package conf

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// UnmarshalYAML decodes a Go duration string ("10s", "250ms", "1m30s"). A plain 0 is
// accepted because "no time" needs no unit; any other bare number is an error, since
// guessing seconds or milliseconds is how timeouts end up a thousand times off.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeError(n, "expected a duration such as 10s or 250ms, got %s", describe(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return nodeError(n, "%q is not a duration (write it like 10s, 250ms or 1m30s)", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration back in the form UnmarshalYAML reads.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

// String formats the duration as time.Duration does ("10s", "1m30s", "0s").
func (d Duration) String() string {
	return time.Duration(d).String()
}

// nodeError reports a problem with a YAML value the way the yaml decoder reports its own
// type errors, so that the decoder goes on and Parse gathers every problem at once
// (a plain error would abort decoding at the first one).
func nodeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
}

// describe names a YAML value for an error message: a scalar quoted, else its kind.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}
