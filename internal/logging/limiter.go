package logging

import (
	"sync"
	"time"
)

// A Limiter lets through at most burst log lines per interval and counts the ones it
// holds back, so that a flood of one event (refused CONNECTs from a password guesser)
// cannot fill the disk or drown the rest of the log. The first line let through after
// lines were held back reports how many (Allow's suppressed). Fixed windows, not a
// token bucket: what a reader of the log needs is a bound and a count, not smoothness.
// Safe for concurrent use; one mutex, no allocation.
type Limiter struct {
	burst    int
	interval int64 // nanoseconds

	mu         sync.Mutex
	start      int64  // unix nanoseconds when the current window began
	n          int    // lines let through in it
	suppressed uint64 // lines held back since the last one let through
}

// NewLimiter returns a Limiter of burst lines per interval (at least one each).
func NewLimiter(burst int, interval time.Duration) *Limiter {
	return &Limiter{burst: max(burst, 1), interval: max(int64(interval), 1)}
}

// Allow reports whether a line may be logged at now, and if so how many lines were held
// back since the last one it let through (for the line to say so).
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed uint64) {
	ns := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	if ns-l.start >= l.interval || ns < l.start {
		l.start, l.n = ns, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
