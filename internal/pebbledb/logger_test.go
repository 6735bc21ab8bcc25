package pebbledb

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestFatalfRecovered: Fatalf logs, and its panic comes back from Recover as a *Fatal
// that carries the message and wraps the first error argument.
func TestFatalfRecovered(t *testing.T) {
	var out bytes.Buffer
	l := Logger{Log: slog.New(slog.NewTextHandler(&out, nil))}
	commit := func() (err error) {
		defer Recover(&err)
		l.Fatalf("pebble: fatal commit error: %v", syscall.ENOSPC)
		return nil
	}
	err := commit()
	var f *Fatal
	if !errors.As(err, &f) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit = %v, want a *Fatal wrapping ENOSPC", err)
	}
	if want := "pebble: fatal commit error: " + syscall.ENOSPC.Error(); err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !strings.Contains(out.String(), "pebble: fatal: pebble: fatal commit error") {
		t.Errorf("not logged: %q", out.String())
	}
}

// TestRecoverPassesOtherPanics: Recover takes only a *Fatal; any other panic goes on.
func TestRecoverPassesOtherPanics(t *testing.T) {
	defer func() {
		if p := recover(); p != "other" {
			t.Fatalf("recovered %v, want the other panic", p)
		}
	}()
	func() (err error) {
		defer Recover(&err)
		panic("other")
	}()
	t.Fatal("the panic did not go on")
}

// TestLevels: Pebble's info messages are debug-level noise; its errors are errors.
func TestLevels(t *testing.T) {
	var out bytes.Buffer
	l := Logger{Log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	l.Infof("flushed %d memtables", 1)
	if out.Len() != 0 {
		t.Errorf("Infof logged at info level: %q", out.String())
	}
	l.Errorf("background error: %v", "x")
	if !strings.Contains(out.String(), "level=ERROR") || !strings.Contains(out.String(), "pebble: background error: x") {
		t.Errorf("Errorf: %q", out.String())
	}
}

// TestErrorsLimited: NewLogger's errors of one kind are a line per second however fast
// Pebble repeats them (a flush retried on a full disk), with the count of the others; an
// error of another kind is logged at once.
func TestErrorsLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		l := NewLogger(slog.New(slog.NewTextHandler(&out, nil)))
		for i := range 100 { // one every 12 ms for 1.2 s, each naming another file
			err := &fs.PathError{Op: "write", Path: fmt.Sprintf("%06d.sst", i), Err: syscall.ENOSPC}
			l.Errorf("background error: %s", err)
			if i == 0 {
				l.Errorf("background error: %s", &fs.PathError{Op: "write", Path: "x.sst", Err: syscall.EIO})
			}
			time.Sleep(12 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		lines := out.lines()
		if len(lines) != 4 {
			t.Fatalf("%d lines, want 4 (the first, the EIO, one a second with the count):\n%s", len(lines), strings.Join(lines, "\n"))
		}
		for i, want := range []string{"000000.sst: no space left on device", "x.sst: input/output error",
			"000083.sst: no space left on device\" suppressed=83", "000099.sst: no space left on device\" suppressed=16"} {
			if !strings.Contains(lines[i], want) {
				t.Errorf("line %d: %q, want it to contain %q", i, lines[i], want)
			}
		}
	})
}

// lockedBuffer is a log's output, written from the limiter's timers too.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}
