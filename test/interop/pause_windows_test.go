package interop_test

import (
	"os"
	"testing"
)

// pause would stop process p, keeping its connections open; Windows has no SIGSTOP.
func pause(t testing.TB, _ *os.Process) {
	t.Helper()
	t.Skip("needs a process stopped with SIGSTOP, which Windows has not")
}
