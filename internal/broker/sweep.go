package broker

import (
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// The expiry sweep runs the session package's Sweeper (session/sweep.go) every
// queue.expiry_sweep while some offline session holds a queued message with an expiry:
// expired messages are dropped, counted as expired, and their records deleted from the
// store. The same sweep removes expired retained messages (retained.go). It is one
// broker-wide timer, armed only while the Sweeper's set is not empty or a retained
// message carries an expiry, so an idle broker, or one whose messages carry no expiry,
// never wakes for it; no goroutine waits for it in between.
type sweep struct {
	every time.Duration

	mu     sync.Mutex // a leaf: taken under a session's lock (Sweeper's notify)
	timer  *time.Timer
	armed  bool
	closed bool

	run sync.Mutex // held while a sweep runs, so that Close waits for it
}

// initSweep makes the sessions' limits carry the Sweeper.
func (b *Broker) initSweep(every time.Duration) {
	if every <= 0 {
		every = 30 * time.Second // conf's default, for a config that skipped EnsureDefaults
	}
	b.sweep.every = every
	b.live.lim.Sweeper = session.NewSweeper(b.armSweep)
}

// armSweep starts the sweep timer unless it runs or the broker is closed. The Sweeper
// calls it, under a session's lock, when a session enters its empty set; a sweep calls
// it when sessions remain.
func (b *Broker) armSweep() {
	w := &b.sweep
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed || w.closed {
		return
	}
	w.armed = true
	if w.timer == nil {
		w.timer = time.AfterFunc(w.every, b.sweepTimer)
	} else {
		w.timer.Reset(w.every)
	}
}

// sweepTimer is the timer's function.
func (b *Broker) sweepTimer() {
	w := &b.sweep
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
	b.sweepExpired(now())
	if b.live.lim.Sweeper.Len() > 0 || b.retainedExpiring() {
		b.armSweep()
	}
}

// sweepExpired drops the queued messages of offline sessions that have expired at now
// (Unix nanoseconds), counts them, and commits the deletion of their records.
func (b *Broker) sweepExpired(now int64) {
	w := &b.sweep
	w.run.Lock()
	defer w.run.Unlock()
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return
	}
	if n := b.live.lim.Sweeper.Sweep(now); n > 0 {
		b.dropped(session.DropExpired, dropCtx{n: n}) // from offline queues
	}
	if n := b.sweepRetained(now); n > 0 {
		b.retainedGauge()
		b.log.Debug("expired retained messages removed", "removed", n)
	}
	b.commit()
}

// stopSweep waits for a sweep that is running and stops the timer.
func (b *Broker) stopSweep() {
	w := &b.sweep
	w.run.Lock()
	defer w.run.Unlock()
	w.mu.Lock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}
