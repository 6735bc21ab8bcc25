// Package testenv tells tests about the environment they run in, as Go's own
// internal/testenv does for the standard library: whether they run in CI, under the race
// detector, with the external peers they need, and how to wait for a condition. Only
// tests import it.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run in CI: .ci/run sets BIFROST_CI=1 and installs every
// external peer the tests use, so there a missing peer is a failure, not a skip.
func CI() bool { return os.Getenv("BIFROST_CI") == "1" }

// Need skips the test, naming what is missing, unless ok. In CI it fails the test
// instead: a peer that CI should have installed cannot hide a test behind a skip.
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if CI() {
		t.Fatalf("%s is missing, and BIFROST_CI=1 requires it (.ci/run installs it)", what)
	}
	t.Skipf("%s is missing: skipped (install it, or run .ci/run)", what)
}

// Command returns the path of the command name, through Need when it is not on the PATH;
// from says how to get it ("apt-get install -y mosquitto").
func Command(t testing.TB, name, from string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	Need(t, err == nil, name+" ("+from+")")
	return path
}
