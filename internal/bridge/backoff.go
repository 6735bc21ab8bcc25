package bridge

import (
	"math/rand/v2"
	"time"
)

// A backoff chooses the waits between reconnects by "decorrelated jitter", as Mosquitto's
// restart_timeout base cap does: each wait is drawn between base and three times the
// last, capped, so that bridges cut off together do not come back in step. base == cap
// gives a constant wait.
type backoff struct {
	base, cap time.Duration
	last      time.Duration
}

// next returns the next wait.
func (b *backoff) next() time.Duration {
	if b.cap <= b.base {
		return b.base
	}
	hi := max(b.last*3, b.base+1)
	d := min(b.base+rand.N(hi-b.base), b.cap)
	b.last = d
	return d
}

// reset starts again from base, after a connection that worked.
func (b *backoff) reset() { b.last = 0 }
