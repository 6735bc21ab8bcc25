package store

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
)

// What the store says when its disk is full: at open, at Load, and when it opens with
// little room left (docs/durability.md, "When the disk is full").

// A spaceError is an open or a Load that a full disk stopped. It names the directory,
// what the store was doing, the space that needs and the space there is, and matches
// ErrNoSpace and its cause.
type spaceError struct {
	msg   string
	cause error
}

func (e *spaceError) Error() string        { return e.msg + ": " + e.cause.Error() }
func (e *spaceError) Unwrap() error        { return e.cause }
func (e *spaceError) Is(target error) bool { return target == ErrNoSpace }

// noSpace returns the spaceError of op (open, reopen, load) in dir, where doing (an
// "-ing" phrase) needed about need bytes (0: unknown) and failed with cause; cause is
// returned as it is unless it is a full disk.
func noSpace(op, dir, doing string, need uint64, cause error) error {
	if !errors.Is(cause, syscall.ENOSPC) {
		return cause
	}
	var b strings.Builder
	fmt.Fprintf(&b, "store: %s %s: no space left on device: %s", op, dir, doing)
	if need > 0 {
		fmt.Fprintf(&b, " needs up to %s free", sizeString(need))
	} else {
		b.WriteString(" needs room to write")
	}
	if free, ok := freeSpace(dir); ok {
		fmt.Fprintf(&b, ", and its file system has %s", sizeString(free))
	}
	if op == "reopen" {
		b.WriteString("; commits fail until space is freed there, and the store then reopens by itself")
	} else {
		b.WriteString("; free space there or move store.dir, then start again")
	}
	return &spaceError{msg: b.String(), cause: cause}
}

// warnLowSpace logs a warning when dir's file system has less than need bytes free, what
// the engine may need for its next write (what names it): the broker serves, and says
// that commits fail once the disk is full.
func warnLowSpace(log *slog.Logger, dir string, need uint64, what string) {
	free, ok := freeSpace(dir)
	if !ok || free >= need {
		return
	}
	log.Warn("store: little space left: commits fail while the disk is full (MQTT 5.0: PUBACK or PUBREC 0x97; 3.1.1: the connection is closed) and work again once space is freed",
		slog.String("dir", dir), slog.String("free", sizeString(free)), slog.String("needs", sizeString(need)+" ("+what+")"))
}

// sizeString formats n bytes for a message: 812 B, 7.9 MiB.
func sizeString(n uint64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
