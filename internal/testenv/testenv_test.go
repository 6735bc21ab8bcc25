package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// outcome is what a fake test ended with.
type outcome struct {
	testing.TB
	fatal, skip string
}

func (o *outcome) Helper() {}
func (o *outcome) Fatalf(format string, args ...any) {
	o.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcome) Skipf(format string, args ...any) {
	o.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a fake test on a goroutine of its own, as the testing package runs a
// test, so that Fatalf and Skipf end it there.
func run(t *testing.T, f func(testing.TB)) *outcome {
	o := &outcome{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(o)
	}()
	<-done
	return o
}

func TestNeed(t *testing.T) {
	for _, tc := range []struct {
		ci, ok              string
		wantFatal, wantSkip bool
	}{
		{ci: "", ok: "missing", wantSkip: true},
		{ci: "1", ok: "missing", wantFatal: true},
		{ci: "", ok: "present"},
		{ci: "1", ok: "present"},
	} {
		t.Run("BIFROST_CI="+tc.ci+"/"+tc.ok, func(t *testing.T) {
			t.Setenv("BIFROST_CI", tc.ci)
			o := run(t, func(tb testing.TB) { Need(tb, tc.ok == "present", "the peer") })
			if (o.fatal != "") != tc.wantFatal || (o.skip != "") != tc.wantSkip {
				t.Fatalf("fatal %q, skip %q; want fatal %v, skip %v", o.fatal, o.skip, tc.wantFatal, tc.wantSkip)
			}
			if msg := o.fatal + o.skip; (tc.wantFatal || tc.wantSkip) && !strings.Contains(msg, "the peer") {
				t.Errorf("%q does not name what is missing", msg)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	t.Setenv("BIFROST_CI", "1")
	if o := run(t, func(tb testing.TB) { Command(tb, "no-such-command-bifrost", "nowhere") }); !strings.Contains(o.fatal, "no-such-command-bifrost (nowhere)") {
		t.Errorf("a missing command in CI: fatal %q, skip %q", o.fatal, o.skip)
	}
	var path string
	if o := run(t, func(tb testing.TB) { path = Command(tb, "go", "the Go toolchain") }); o.fatal != "" || path == "" {
		t.Errorf("go: path %q, fatal %q", path, o.fatal)
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	if o := run(t, func(tb testing.TB) { WaitFor(tb, "n to reach 5", func() bool { n++; return n == 5 }) }); o.fatal != "" || n != 5 {
		t.Errorf("a condition met on the 5th poll: fatal %q after %d polls", o.fatal, n)
	}
	o := run(t, func(tb testing.TB) { waitFor(tb, "the impossible", func() bool { return false }, 50*time.Millisecond) })
	if !strings.Contains(o.fatal, "waiting for the impossible") {
		t.Errorf("a condition never met: fatal %q, want it to name what was awaited", o.fatal)
	}
}
