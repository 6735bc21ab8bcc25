package testenv

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// Deps returns the packages pkg links when built with tags ("" for none), as the go
// command lists them: a test binary carries no package list. Tests use it to hold a
// binary or the embedding API to what it may link.
func Deps(t testing.TB, tags, pkg string) []string {
	t.Helper()
	gocmd := Command(t, "go", "the Go toolchain")
	out, err := exec.Command(gocmd, "list", "-tags", tags, "-deps", pkg).Output()
	Need(t, err == nil, fmt.Sprintf("a working go list of %s's packages (%v)", pkg, err))
	return strings.Fields(string(out))
}

// Under reports whether pkg is prefix or a package below it.
func Under(pkg, prefix string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}
