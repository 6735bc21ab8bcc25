// Package pebbledb is what bifrost's two Pebble databases, the broker's store
// (internal/store) and the cluster's Raft log (internal/cluster/raftstore), do alike:
// Pebble's logger on slog (logger.go), the format record that tells each database from
// the other and from a newer build's (format.go), and what keeps Pebble from hanging on
// a full disk: an open that gives up when the write-ahead log it replays cannot be
// written into a table (open.go, where the whole of it is described), the room an open
// needs for its MANIFEST (room.go) and the pacing of Pebble's retries of table writes
// (tables.go).
//
// Pebble reports a failed commit through Fatalf and expects it not to return: its
// default logger exits the process. Logger.Fatalf panics with a *Fatal instead, so that
// the goroutine that committed can turn it into an error with Recover and decide what
// the database is worth after it. In any other goroutine (a flush, a compaction) the
// panic stops the process, as Pebble intends.
//
// Pebble retries a failed flush or compaction at once and forever (on a full disk, tens
// of times a second), reporting each failure through Errorf: NewLogger's Logger logs
// those through a logging.Limiter, a line per kind a second.
package pebbledb

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/logging"
)

// Logger sends Pebble's messages to Log: Infof at debug level (Pebble reports every
// flush and compaction), Errorf at error level (through limit, if set), Fatalf at error
// level and then a panic with a *Fatal.
type Logger struct {
	Log   *slog.Logger
	limit *logging.Limiter
}

// errorEvery is the interval of a Logger's limiter: at most a line per kind of error
// (Errorf's format and the error's errno) in it.
const errorEvery = time.Second

// NewLogger returns a Logger on log whose errors are limited to a line per kind per
// errorEvery, with the count of those left out.
func NewLogger(log *slog.Logger) Logger {
	return Logger{Log: log, limit: logging.NewLimiter(1, errorEvery)}
}

// Infof implements pebble.Logger.
func (l Logger) Infof(format string, args ...any) {
	l.Log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

// Errorf implements pebble.Logger.
func (l Logger) Errorf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	if l.limit == nil {
		l.Log.Error(msg)
		return
	}
	l.limit.Log(l.Log, slog.LevelError, errorKind(format, args), msg)
}

// errorKind is what tells one kind of Pebble error from another: the message's format and
// the errno of its errors (a full disk, an I/O error), never the text, which names files.
func errorKind(format string, args []any) string {
	kind := format
	for _, a := range args {
		var errno syscall.Errno
		if err, ok := a.(error); ok && errors.As(err, &errno) {
			kind += " " + errno.Error()
		}
	}
	return kind
}

// Fatalf implements pebble.Logger: it logs and panics with a *Fatal whose cause is the
// first error among args.
func (l Logger) Fatalf(format string, args ...any) {
	f := &Fatal{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			f.cause = err
			break
		}
	}
	l.Log.Error("pebble: fatal: " + f.msg)
	panic(f)
}

// A Fatal is what Logger.Fatalf panics with, and the error Recover returns.
type Fatal struct {
	msg   string
	cause error // the first error among Fatalf's arguments
}

func (f *Fatal) Error() string { return f.msg }
func (f *Fatal) Unwrap() error { return f.cause }

// Recover, deferred, recovers a *Fatal panic into *err; other panics go on.
func Recover(err *error) {
	if p := recover(); p != nil {
		f, ok := p.(*Fatal)
		if !ok {
			panic(p)
		}
		*err = f
	}
}
