package pebbledb

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestFatalfRecovered: Fatalf logs, and its panic comes back from Recover as a *Fatal
// that carries the message and wraps the first error argument.
func TestFatalfRecovered(t *testing.T) {
	var out bytes.Buffer
	l := Logger{slog.New(slog.NewTextHandler(&out, nil))}
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
	l := Logger{slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	l.Infof("flushed %d memtables", 1)
	if out.Len() != 0 {
		t.Errorf("Infof logged at info level: %q", out.String())
	}
	l.Errorf("background error: %v", "x")
	if !strings.Contains(out.String(), "level=ERROR") || !strings.Contains(out.String(), "pebble: background error: x") {
		t.Errorf("Errorf: %q", out.String())
	}
}
