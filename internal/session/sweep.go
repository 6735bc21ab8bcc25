package session

import "sync"

// The expiry sweep
//
// A message queued for a session that is offline expires where it lies: the delivery
// path drops it when the client comes back [MQTT-3.3.2-5], and Load drops it at a
// restart, but a client that never comes back (a long or infinite session expiry) would
// keep it in memory and in the store for as long as its session lives. The Sweeper
// drops such messages while the broker runs.
//
// It walks only what may hold one: the set of offline sessions whose queue has a message
// with an expiry. A session joins the set, under its own lock, when
//   - a message with an expiry is queued for it while it is offline (DeliverStored),
//   - it goes offline with such a message in its queue (Detach),
//   - such a message is restored into its queue (RestoreQueued),
//
// and leaves it when a sweep finds it online, ended, or with no such message left, or
// when it ends (End, Clear). Session.swept mirrors membership, changed under the
// session's lock together with the set, so a session is added once however many
// messages it queues, and a sweep that takes a session out cannot race a delivery that
// puts it back in. Only queued entries are dropped: a message whose PUBLISH was sent
// (inflight) has started its onward delivery and is completed [MQTT-3.3.2-5].
//
// Rejected: a timer per message or per session (one parked timer each, the cost the
// memory model avoids); walking every session on each sweep (the many idle ones hold
// nothing to expire); a heap of deadlines (exact, but it must follow every entry the
// delivery path removes, and a few seconds' lateness costs nothing here: a late drop is
// still a drop before any delivery).
//
// Lock order: a session's lock → Sweeper.mu → whatever notify takes. Sweep takes the
// sessions' locks one at a time, holding no other lock of the Sweeper's but run.

// A Sweeper drops the expired messages queued for offline sessions (see above). Its
// methods are safe for concurrent use.
type Sweeper struct {
	notify func() // called when the set stops being empty; may be nil

	mu  sync.Mutex
	set map[*Session]struct{} // guarded by mu

	run  sync.Mutex // one Sweep at a time
	snap []*Session // Sweep's copy of the set; guarded by run
}

// NewSweeper returns an empty Sweeper. notify, if not nil, is called each time a session
// enters an empty set, under that session's lock: the broker arms its sweep timer then.
// It must not take a session's lock.
func NewSweeper(notify func()) *Sweeper {
	return &Sweeper{notify: notify, set: make(map[*Session]struct{})}
}

// Len is the number of sessions in the set.
func (w *Sweeper) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.set)
}

// Sweep drops the queued messages that have expired at now (Unix nanoseconds) from every
// offline session in the set, deleting their records from the store (staged in the
// Journal: the caller commits), and returns how many it dropped.
func (w *Sweeper) Sweep(now int64) (dropped int) {
	w.run.Lock()
	defer w.run.Unlock()
	w.mu.Lock()
	for s := range w.set {
		w.snap = append(w.snap, s)
	}
	w.mu.Unlock()
	for _, s := range w.snap {
		dropped += s.sweepExpired(now)
	}
	clear(w.snap)
	w.snap = w.snap[:0]
	if cap(w.snap) > 1024 {
		w.snap = nil // a burst of offline sessions is not kept
	}
	return dropped
}

// watchLocked puts s in the sweeper's set. s's lock is held.
func (s *Session) watchLocked() {
	w := s.lim.Sweeper
	if w == nil || s.swept || s.ended {
		return
	}
	s.swept = true
	w.mu.Lock()
	w.set[s] = struct{}{}
	first := len(w.set) == 1
	w.mu.Unlock()
	if first && w.notify != nil {
		w.notify()
	}
}

// unwatchLocked takes s out of the sweeper's set. s's lock is held.
func (s *Session) unwatchLocked() {
	if !s.swept {
		return
	}
	s.swept = false
	w := s.lim.Sweeper
	w.mu.Lock()
	delete(w.set, s)
	w.mu.Unlock()
}

// watchQueueLocked puts s in the set if its queue holds a message with an expiry: s has
// just gone offline. s's lock is held.
func (s *Session) watchQueueLocked() {
	if s.lim.Sweeper == nil || s.fl == nil || s.swept {
		return
	}
	f := s.fl
	for i := f.qhead; i < len(f.queue); i++ {
		if f.queue[i].msg.Expiry != 0 {
			s.watchLocked()
			return
		}
	}
}

// sweepExpired drops s's queued messages that have expired at now, if s is offline, and
// takes s out of the sweeper's set unless a message with an expiry is left. It returns
// how many it dropped.
func (s *Session) sweepExpired(now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	if s.conn != nil || f == nil || s.ended {
		s.unwatchLocked() // Detach puts it back if need be
		return 0
	}
	persist := s.persistentLocked()
	expiring := false
	var ds Drops
	keep := f.queue[:f.qhead]
	for i := f.qhead; i < len(f.queue); i++ {
		e := f.queue[i]
		_, has, alive := e.msg.Remaining(now)
		if !alive {
			// Never sent: dropped for this subscriber [MQTT-3.3.2-5], and its record
			// (with the message, if this was its last reference) deleted.
			f.queueBytes -= e.msg.Size()
			s.dropEntryLocked(&e, persist, DropExpired, &ds)
			continue
		}
		expiring = expiring || has
		keep = append(keep, e)
	}
	clear(f.queue[len(keep):])
	f.queue = keep
	if f.queueLen() == 0 {
		f.queue, f.qhead = f.queue[:0], 0
	}
	if !expiring {
		s.unwatchLocked()
	}
	s.releaseFlowsIfIdle()
	return int(ds[DropExpired])
}
