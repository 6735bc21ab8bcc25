package session

import (
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Gates: output held for something outside the session.
//
// The cluster holds a client's acknowledgement until the other nodes have what it
// confirms: a SUBACK until every live peer routes the new filter, a PUBACK or PUBREC
// until every peer that got the message acknowledged it. That is the store's hold
// (hold.go) with another releaser: from the offset where the gate is taken, everything
// encoded for the session stays in its pending buffer, in order, until every gate is open
// (and the store's hold, if any, released). A connection that closes drops its gates:
// opening one later does nothing.

// A Gate is one hold on a session's output, opened by Open. The zero Gate holds nothing.
type Gate struct {
	s  *Session
	id uint64
}

var gateIDs atomic.Uint64

// Gate holds s's output from what is encoded next until the returned Gate is opened. An
// offline session holds nothing.
func (s *Session) Gate() Gate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gateLocked(1)
}

// gateLocked takes a Gate of n holds, to be opened n times; none for n 0. s's lock is
// held.
func (s *Session) gateLocked(n int) Gate {
	if s.conn == nil || n <= 0 {
		return Gate{}
	}
	f := s.flows()
	d := f.durable()
	if !f.held() {
		d.holdFrom = s.outLen()
	}
	if d.gates == 0 {
		d.gateID = gateIDs.Add(1)
	}
	d.gates += uint32(n)
	return Gate{s: s, id: d.gateID}
}

// SendGated sends an acknowledgement of an inbound PUBLISH held by a Gate of gates holds
// (opened gates times, one per releaser: a cluster's peers, its retained change), taken
// in the same critical section, and with durable by the store as SendDurable holds it.
// flush reports whether the session is to be flushed: never, as its output is held
// until the last releaser writes it.
func (s *Session) SendGated(a *packet.Ack, gates int, durable bool) (flush bool, g Gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g = s.gateLocked(gates)
	if durable {
		flush = s.sendDurableLocked(a)
	} else {
		flush = s.sendLocked(a)
	}
	return flush && !s.heldLocked(), g
}

// Open releases one hold; once no gate and no store hold remains, the held output is
// written. It may be called from any goroutine, once per hold the Gate was taken with.
func (g Gate) Open() {
	s := g.s
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	if f == nil || f.d == nil || f.d.gateID != g.id || f.d.gates == 0 {
		return // the connection closed: its held output went with it
	}
	if f.d.gates--; f.d.gates > 0 {
		return
	}
	s.flushLocked()
	s.releaseFlowsIfIdle()
}

// Session returns the session g holds; nil for the zero Gate.
func (g Gate) Session() *Session { return g.s }
