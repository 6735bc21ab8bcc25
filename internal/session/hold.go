package session

import (
	"errors"

	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// Held output (the why is in journal.go).
//
// While a session holds, Flush writes nothing: every packet encoded for it stays in the
// pending buffer, in order, until the Journal reports the generation the hold waits for.
// Marks note the held acknowledgements whose outcome a failed commit changes: the offset
// of the packet and, for a 5.0 PUBACK or PUBREC encoded with an explicit reason code,
// the offset of that code. A hold lives in the flows, which stay allocated while it does.

// A mark is a held acknowledgement that depends on the commit of generation gen.
type mark struct {
	gen  uint64
	off  int    // offset of the packet in the pending buffer: where a failure cuts
	code int    // offset of its reason code byte, rewritten on failure; -1: cut and close
	pid  uint16 // a PUBREC's packet id, forgotten when its commit fails (the exchange ends)
}

// outLen is the length of the pending buffer. s's lock is held.
func (s *Session) outLen() int {
	if s.out == nil {
		return 0
	}
	return len(*s.out)
}

// holdLocked holds s's output, from offset off of the pending buffer on, until the
// Journal's current generation is durable, and returns that generation. s's lock and j.mu
// are held.
func (s *Session) holdLocked(j *Journal, f *flows, off int) uint64 {
	d := f.durable()
	if !f.held() || off < d.holdFrom {
		d.holdFrom = off
	}
	d.held = true
	d.holdGen = j.waitLocked(s, d)
	return d.holdGen
}

// holdMarkLocked holds s's output for a change just staged that the client is about to
// learn of (a SUBACK, a PUBCOMP): if its commit fails, the output is cut at off and the
// connection closed. s's lock and j.mu are held; nothing is held for an offline session.
func (s *Session) holdMarkLocked(j *Journal, off int) {
	if s.conn == nil {
		return
	}
	f := s.flows()
	g := s.holdLocked(j, f, off)
	f.d.marks = append(f.d.marks, mark{gen: g, off: off, code: -1})
}

// SendDurable sends an acknowledgement of an inbound PUBLISH (PUBACK or PUBREC) that the
// store must have before the client may see it: it is held until the Journal's current
// generation is durable. Should that commit fail, a 5.0 client gets the acknowledgement
// with reason code 0x97 (Quota exceeded, the disk is full) or 0x80 (Unspecified error)
// instead, and a 3.1.1 client, which cannot be told, loses the connection without it, so
// that it publishes again. Without a journal it is Send.
//
// It reports whether the session is to be flushed: not when the acknowledgement is held,
// since the Journal writes held output once it may go.
func (s *Session) SendDurable(a *packet.Ack) (flush bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sendDurableLocked(a)
}

// sendDurableLocked is SendDurable with s's lock held.
func (s *Session) sendDurableLocked(a *packet.Ack) (flush bool) {
	j := s.lim.Journal
	if j == nil || s.conn == nil {
		return s.sendLocked(a)
	}
	f := s.flows()
	off := s.outLen()
	j.begin()
	g := s.holdLocked(j, f, off)
	j.end()
	m := mark{gen: g, off: off, code: -1}
	if a.PacketType == packet.PUBREC {
		m.pid = a.PacketID
	}
	if s.version == packet.V5 && (a.PacketType == packet.PUBACK || a.PacketType == packet.PUBREC) &&
		a.Size(s.version) <= 5 && (s.clientMaxPacket == 0 || s.clientMaxPacket >= 5) {
		// The reason code is written even when it is Success (spec 3.4.2.1 lets a sender
		// omit it), so that a failure can rewrite it in place.
		if s.out == nil {
			s.out = bufpool.Get(5)
		} else {
			s.out = bufpool.Grow(s.out, 5)
		}
		*s.out = append(*s.out, byte(a.PacketType)<<4, 3, byte(a.PacketID>>8), byte(a.PacketID), byte(a.Code))
		m.code = off + 4
	} else {
		s.sendLocked(a)
	}
	f.d.marks = append(f.d.marks, m)
	return false // held: the Journal writes it
}

// released is the Journal's report that generation gen is durable (err nil) or failed.
// It runs on the store's committer goroutine.
func (s *Session) released(gen uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	if f == nil || !f.held() {
		return // detached, or released already
	}
	d := f.d
	rc := packet.UnspecifiedError
	if errors.Is(err, store.ErrNoSpace) {
		rc = packet.QuotaExceeded
	}
	cut := -1
	keep := d.marks[:0]
	for _, m := range d.marks {
		switch {
		case m.gen > gen:
			keep = append(keep, m)
		case err == nil:
		case m.code >= 0 && s.out != nil && m.code < len(*s.out):
			(*s.out)[m.code] = byte(rc)
			if m.pid != 0 {
				f.forgetInbound(m.pid)
			}
		case cut < 0 || m.off < cut:
			cut = m.off
		}
	}
	clear(d.marks[len(keep):])
	d.marks = keep
	if cut >= 0 {
		s.failLocked(f, cut, rc)
		return
	}
	if d.holdGen > gen {
		return // held for a later generation too
	}
	d.held = false
	s.flushLocked()
	s.releaseFlowsIfIdle()
}

// failLocked ends a connection whose held acknowledgement cannot be sent: what precedes
// it is sent (it is durable: it was encoded earlier, and generations are reported in
// order), a 5.0 client is told why with a DISCONNECT, and the connection closes.
func (s *Session) failLocked(f *flows, cut int, rc packet.ReasonCode) {
	if s.out != nil && cut <= len(*s.out) {
		*s.out = (*s.out)[:cut]
	}
	f.dropHold()
	if s.conn != nil {
		if s.version == packet.V5 {
			s.sendLocked(&packet.Disconnect{Code: rc})
		}
		s.flushLocked()
		s.conn.Shutdown()
	}
	s.releaseFlowsIfIdle()
}

// dropHeldLocked discards the held part of the output, which must never be sent (the
// connection is being closed), and ends the hold. s's lock is held.
func (s *Session) dropHeldLocked() {
	f := s.fl
	if f == nil || !f.held() {
		return
	}
	if s.out != nil && f.d.holdFrom <= len(*s.out) {
		*s.out = (*s.out)[:f.d.holdFrom]
	}
	f.dropHold()
}

// dropHold ends the hold, forgetting its marks.
func (f *flows) dropHold() {
	d := f.d
	if d == nil {
		return
	}
	d.held = false
	d.holdFrom = 0
	d.gates = 0
	clear(d.marks)
	d.marks = d.marks[:0]
}

// forgetInbound removes an inbound QoS 2 packet id awaiting PUBREL.
func (f *flows) forgetInbound(pid uint16) {
	for i, id := range f.awaitRel {
		if id == pid {
			f.awaitRel = append(f.awaitRel[:i], f.awaitRel[i+1:]...)
			if len(f.awaitRel) == 0 {
				f.awaitRel = nil
			}
			return
		}
	}
}

// Held reports whether the session's output is held for the store, for tests.
func (s *Session) Held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fl != nil && s.fl.held()
}
