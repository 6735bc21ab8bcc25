// Package diskspace is what bifrost's stores say when their disk is full: the free space
// of a directory's file system, sizes written for people, and the error that names the
// directory, what the store was doing, the space that needs and the space there is. It
// imports no database engine: the broker's log engine uses it as much as the Pebble
// databases (internal/store, internal/cluster/raftstore) do.
//
// Files: diskspace.go the error and the sizes; free_unix.go and free_other.go the free
// space.
package diskspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// An Error is an operation that a full disk stopped. Its message names the directory,
// what the operation was doing, the space that needs and the space there is; it matches
// its kind (the caller's sentinel, such as store.ErrNoSpace) and its cause.
type Error struct {
	msg   string
	kind  error
	cause error
}

func (e *Error) Error() string        { return e.msg + ": " + e.cause.Error() }
func (e *Error) Unwrap() error        { return e.cause }
func (e *Error) Is(target error) bool { return target == e.kind }

// NoSpace returns the Error of op ("store: open") in dir, where doing (an "-ing" phrase)
// needed about need bytes (0: unknown) and failed with cause; advice says what to do
// ("free space there or move store.dir, then start again"). The error matches kind.
// cause is returned as it is unless it is a full disk (ENOSPC).
func NoSpace(kind error, op, dir, doing string, need uint64, advice string, cause error) error {
	if !errors.Is(cause, syscall.ENOSPC) {
		return cause
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: no space left on device: %s", op, dir, doing)
	if need > 0 {
		fmt.Fprintf(&b, " needs up to %s free", Bytes(need))
	} else {
		b.WriteString(" needs room to write")
	}
	if free, ok := Free(dir); ok {
		fmt.Fprintf(&b, ", and its file system has %s", Bytes(free))
	}
	if advice != "" {
		b.WriteString("; " + advice)
	}
	return &Error{msg: b.String(), kind: kind, cause: cause}
}

// FilesSize returns the total size of the files in dir whose names end with suffix.
func FilesSize(dir, suffix string) uint64 {
	names, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, d := range names {
		if !strings.HasSuffix(d.Name(), suffix) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, d.Name())); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}

// Bytes formats n bytes for a message: 812 B, 7.9 MiB.
func Bytes(n uint64) string {
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
