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
	log        *slog.Logger // the last suppressed line's
	level      slog.Level
	msg        string
	args       []any
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
	switch {
	case !w.open:
		w.open, w.n = true, 1
		l.mu.Unlock()
		time.AfterFunc(l.every, func() { l.end(key) })
	case w.n < l.burst:
		w.n++
		l.mu.Unlock()
	default:
		w.suppressed++
		w.log, w.level, w.msg, w.args = log, level, msg, args
		l.mu.Unlock()
		return
	}
	log.Log(context.Background(), level, msg, args...)
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
	log, level, msg, args, n := w.log, w.level, w.msg, w.args, w.suppressed
	w.n, w.suppressed, w.log, w.args = 1, 0, nil, nil
	l.mu.Unlock()
	log.Log(context.Background(), level, msg, append(args[:len(args):len(args)], slog.Int("suppressed", n))...)
	time.AfterFunc(l.every, func() { l.end(key) })
}
