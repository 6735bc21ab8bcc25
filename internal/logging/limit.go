package logging

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// A Limiter logs at most one line per key per interval, for errors that can repeat in a
// loop (a database retrying a write on a full disk). The first line of a key is logged at
// once and opens a window of the interval; the lines of that key within the window are
// counted, and when it ends the last of them is logged with suppressed=N (how many were
// not logged) and a new window opens; a window with none ends quietly. So a flood costs
// a line per interval, an isolated error is logged when it happens, and no count is
// lost. A timer runs only while a window is open; the memory is a small entry per key
// ever seen, so keys must come from a bounded set (a message format, an errno), never
// from data. Safe for concurrent use.
type Limiter struct {
	log   *slog.Logger
	every time.Duration

	mu   sync.Mutex
	keys map[string]*window // guarded by mu
}

// window is one key's open interval.
type window struct {
	open       bool
	suppressed int
	level      slog.Level
	msg        string
	args       []any // the last suppressed line's
}

// NewLimiter returns a Limiter that logs to log at most one line per key per every.
func NewLimiter(log *slog.Logger, every time.Duration) *Limiter {
	return &Limiter{log: log, every: every, keys: make(map[string]*window)}
}

// Log logs msg with args at level, unless a line of key was logged less than the
// interval ago: then it is counted and reported when the interval ends.
func (l *Limiter) Log(level slog.Level, key, msg string, args ...any) {
	l.mu.Lock()
	w := l.keys[key]
	if w == nil {
		w = new(window)
		l.keys[key] = w
	}
	if w.open {
		w.suppressed++
		w.level, w.msg, w.args = level, msg, args
		l.mu.Unlock()
		return
	}
	w.open = true
	l.mu.Unlock()
	l.log.Log(context.Background(), level, msg, args...)
	time.AfterFunc(l.every, func() { l.end(key) })
}

// end ends key's window: it logs the last suppressed line, if any, and opens the next.
func (l *Limiter) end(key string) {
	l.mu.Lock()
	w := l.keys[key]
	if w.suppressed == 0 {
		w.open = false
		l.mu.Unlock()
		return
	}
	level, msg, args, n := w.level, w.msg, w.args, w.suppressed
	w.suppressed, w.args = 0, nil
	l.mu.Unlock()
	l.log.Log(context.Background(), level, msg, append(args[:len(args):len(args)], slog.Int("suppressed", n))...)
	time.AfterFunc(l.every, func() { l.end(key) })
}
