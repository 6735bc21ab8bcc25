//go:build unix

package interop_test

import (
	"os"
	"syscall"
	"testing"
)

// pause stops process p (SIGSTOP): it keeps its connections open and reads nothing.
func pause(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}
