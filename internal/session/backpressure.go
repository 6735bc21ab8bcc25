package session

// Backpressure: a full queue that holds its publishers back instead of dropping
//
// With queue.when_full: backpressure the broker gives each delivery of a client's PUBLISH
// a Holder. A QoS 1 or 2 message that finds an online session's queue full is then
// queued all the same if the Holder agrees to hold its publisher back (the broker stops
// reading the publisher's connection), and the queue is marked held (flows.bp). The
// publisher has been, or is about to be, told the message is safe: nothing it was told
// so of is lost. Once the queue has drained to half its bounds (pumpLocked), or the
// session goes offline or is cleared, Limits.Drained is called, under the session's
// lock, and the broker reads the publishers it held again.
//
// Both the mark and Drained happen under the session's lock, and so does Hold: a
// publisher held for this queue is either registered before the mark is cleared (and
// released by that Drained) or registers after it and marks the queue again.
//
// The queue goes past its bounds only by what held publishers had already read when
// they were held: the rest of the read that brought the message, once per publisher
// until the queue has drained (docs/queues.md gives the numbers).
//
// An offline session, a queue given up (GiveUp) and a delivery without a Holder (an
// in-process publish, a will, a message from another node) drop at the bound as
// when_full: drop does.

// A Holder is the publisher of a delivery, able to stop sending until a queue drains.
type Holder interface {
	// Hold is called, under s's lock, when a message of the publisher finds s's queue
	// full, s online. It reports whether the publisher is now held back until
	// Limits.Drained(s): then the message is queued past the bounds; if not (s is the
	// publisher's own session, or is held back itself), it is dropped. It must not take
	// a session's lock. queued is the number of messages in s's queue.
	Hold(s *Session, queued int) bool
}

// The states of a queue under backpressure (flows.bp).
const (
	bpHeld    uint8 = 1 << iota // publishers are held back until the queue drains (Drained)
	bpGivenUp                   // GiveUp: it drops what finds it full until it drains
)

// drainDiv divides the queue bounds into the mark the queue must drain to before the
// publishers it held are read again: half, so that they are resumed once per half a
// queue taken by the client, not after every message, and the client still has half a
// queue to take while they refill it.
const drainDiv = 2

// overfillLocked reports whether d, which finds the queue full, is queued all the same:
// s is online, not given up, and d's publisher is held back for it. s's lock is held.
func (s *Session) overfillLocked(f *flows, d *Delivery) bool {
	if d.Hold == nil || s.conn == nil || f.bp&bpGivenUp != 0 || !d.Hold.Hold(s, f.queueLen()) {
		return false
	}
	f.bp |= bpHeld
	return true
}

// drainedLocked ends backpressure on a queue that has drained to the mark (drainDiv),
// holding publishers or given up; it is called after the queue shrank. s's lock is held.
func (s *Session) drainedLocked(f *flows) {
	if f.bp != 0 && f.queueLen() <= s.lim.QueueMessages/drainDiv && f.queueBytes <= s.lim.QueueBytes/drainDiv {
		s.unholdLocked(f)
	}
}

// unholdLocked releases the publishers the queue holds back, if any, and forgets that it
// was given up. s's lock is held.
func (s *Session) unholdLocked(f *flows) {
	held := f.bp&bpHeld != 0
	f.bp = 0
	if held && s.lim.Drained != nil {
		s.lim.Drained(s)
	}
}

// GiveUp ends backpressure on s's queue, whose client has taken nothing from it for the
// broker's queue.max_pause: the publishers it holds back are released (Limits.Drained) and
// the messages that find it full are dropped until it has drained to half its bounds. It
// returns the number of messages queued; 0 if the queue held no publisher.
func (s *Session) GiveUp() (queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	if f == nil || f.bp&bpHeld == 0 {
		if s.lim.Drained != nil {
			s.lim.Drained(s) // whatever the broker still has for s
		}
		return 0
	}
	s.unholdLocked(f)
	f.bp = bpGivenUp
	return f.queueLen()
}
