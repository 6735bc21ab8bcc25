package logging

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// A Limiter bounds the log lines of events that can repeat in a loop (refused CONNECTs
// from a password guesser, a database retrying a write on a full disk, dropped
// messages): at most burst lines per key per interval. The first line of a key is logged
// at once and opens a window of the interval; up to burst lines of that key in the window
// are logged too, the rest are counted, and when the window ends the last of them is
// logged with suppressed=N (how many were not logged) and a new window opens; a window
// with none ends quietly. So a flood costs burst lines per interval, an isolated event is
// logged when it happens, and no count is lost. A timer runs only while a window is open;
// the memory is a small entry per key ever seen, so keys must come from a bounded set (a
// message, a reason, an errno), never from data. Safe for concurrent use.
type Limiter struct {
	burst int
	every time.Duration

	mu   sync.Mutex
	keys map[string]*window // guarded by mu
}

// window is one key's open interval.
type window struct {
	open       bool
	n          int // lines logged in it
	suppressed int
	last       line // the last suppressed line given to Log
	shown      line // the last line logged: reported instead when the suppressed were only counted (Skip)
}

// line is a log line kept for the end of a window.
type line struct {
	log   *slog.Logger
	level slog.Level
	msg   string
	args  []any
}

// NewLimiter returns a Limiter of at most burst lines (at least one) per key per every.
func NewLimiter(burst int, every time.Duration) *Limiter {
	return &Limiter{burst: max(burst, 1), every: every, keys: make(map[string]*window)}
}

// Log logs msg with args at level to log, unless burst lines of key were logged in the
// current window: then it is counted and reported when the window ends.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	l.mu.Lock()
	w := l.keys[key]
	if w == nil {
		w = new(window)
		l.keys[key] = w
	}
	ln := line{log, level, msg, args}
	switch {
	case !w.open:
		w.open, w.n, w.shown = true, 1, ln
		l.mu.Unlock()
		time.AfterFunc(l.every, func() { l.end(key) })
	case w.n < l.burst:
		w.n++
		w.shown = ln
		l.mu.Unlock()
	default:
		w.suppressed++
		w.last = ln
		l.mu.Unlock()
		return
	}
	log.Log(context.Background(), level, msg, args...)
}

// Skip reports whether a line of key would be suppressed now and, if so, counts it,
// allocating nothing: a hot path asks it before it builds the line's arguments, and
// calls Log only when it reports false. A window whose suppressed lines were all only
// counted ends with its last logged line again, with suppressed=N.
func (l *Limiter) Skip(key string) bool { return l.SkipN(key, 1) }

// SkipN is Skip for a line that stands for n events (a step that dropped n messages):
// suppressed, it counts as n.
func (l *Limiter) SkipN(key string, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil || !w.open || w.n < l.burst {
		return false
	}
	w.suppressed += n
	return true
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
	ln, n := w.last, w.suppressed
	if ln.log == nil {
		ln = w.shown // counted by Skip alone
	}
	w.n, w.suppressed, w.last, w.shown = 1, 0, line{}, ln
	l.mu.Unlock()
	ln.log.Log(context.Background(), ln.level, ln.msg, append(ln.args[:len(ln.args):len(ln.args)], slog.Int("suppressed", n))...)
	time.AfterFunc(l.every, func() { l.end(key) })
}
