package conf

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// byteUnits are the units a ByteSize may be written with. Units are case-sensitive, so
// that "mb" (millibit?) or "Mb" (megabit?) is an error rather than a guess. Decimal
// units are powers of 1000 and binary units powers of 1024, as their names say.
// String tries them in this order, largest first.
var byteUnits = []struct {
	name string
	size int64
}{
	{"GiB", 1 << 30},
	{"GB", 1e9},
	{"MiB", 1 << 20},
	{"MB", 1e6},
	{"KiB", 1 << 10},
	{"KB", 1e3},
	{"B", 1},
}

// errByteSize explains the accepted forms; every parse error wraps it.
var errByteSize = errors.New("write a size as bytes (1048576) or a whole number with one of B, KB, MB, GB, KiB, MiB, GiB (1MiB)")

// ParseByteSize parses a size: a whole number of bytes, optionally followed (with or
// without a space) by a unit from B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers
// of 1024), or the word "auto" for ByteSizeAuto. Fractions and negative sizes are errors.
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	if s == "auto" {
		return ByteSizeAuto, nil
	}
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	if digits == 0 {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("%q: a size must not be negative", s)
		}
		return 0, fmt.Errorf("%q: %w", s, errByteSize)
	}
	n, err := strconv.ParseInt(s[:digits], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large", s)
	}
	unit := strings.TrimPrefix(s[digits:], " ")
	if unit == "" {
		return ByteSize(n), nil
	}
	for _, u := range byteUnits {
		if u.name == unit {
			if n > math.MaxInt64/u.size {
				return 0, fmt.Errorf("%q is too large", s)
			}
			return ByteSize(n * u.size), nil
		}
	}
	return 0, fmt.Errorf("%q: %w", s, errByteSize)
}

// UnmarshalYAML decodes a size written as ParseByteSize accepts. Whether "auto" is
// allowed depends on the field, so Validate, not the decoder, rejects it where it is not.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeError(n, "expected a size such as 64MiB, got %s", describe(n))
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return nodeError(n, "%v", err)
	}
	*b = v
	return nil
}

// MarshalYAML writes the size back in the form UnmarshalYAML reads: a plain number when
// no unit larger than a byte divides it, else the String form.
func (b ByteSize) MarshalYAML() (any, error) {
	if n, unit := b.split(); b != ByteSizeAuto && (unit == "" || unit == "B") {
		return n, nil
	}
	return b.String(), nil
}

// String formats the size with the largest unit that divides it exactly, preferring a
// binary unit to a decimal one of the same order: 512MiB, 1GB, 1500B, 0, auto.
func (b ByteSize) String() string {
	if b == ByteSizeAuto {
		return "auto"
	}
	n, unit := b.split()
	return strconv.FormatInt(n, 10) + unit
}

// split returns b as a count of its largest exact unit; sizes below 1 have no unit.
func (b ByteSize) split() (int64, string) {
	if b <= 0 {
		return int64(b), ""
	}
	for _, u := range byteUnits {
		if int64(b)%u.size == 0 {
			return int64(b) / u.size, u.name
		}
	}
	panic("unreachable: every size divides by 1")
}
