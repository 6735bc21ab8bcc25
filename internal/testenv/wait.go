package testenv

import (
	"testing"
	"time"
)

// Timeout bounds every wait of a test: it decides only how long a failing test takes,
// never whether a passing one passes, so it is generous (-race on two shared cores).
const Timeout = 20 * time.Second

// WaitFor polls cond until it holds, and fails the test, naming what it waited for, if
// it does not hold within Timeout. Polls start 1 ms apart and back off to 20 ms, so a
// condition met at once costs little and an expensive one (a metrics scrape, a GC) is
// not run in a tight loop.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, cond, Timeout)
}

// waitFor is WaitFor with its bound given, for this package's own test.
func waitFor(t testing.TB, what string, cond func() bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pause)
	}
}
