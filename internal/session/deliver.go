package session

import (
	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Deliver gives the session a message to send. QoS 0 is written at once, or shed when the
// connection is backed up or absent; QoS 1 and 2 are written while the client's receive
// window has room and the connection is not backed up, and queued otherwise, up to the
// queue bounds. It reports whether the session became dirty and, if the message was not
// taken, why.
//
// # Slow consumers
//
// A connection is backed up when more than Limits.SlowBytes wait to be sent to it. QoS 0
// is shed (counted as slow_consumer) when the connection itself holds that much
// (Conn.Buffered): what the session has encoded and not flushed yet goes out at the end
// of the round. Under memory pressure (Limits.Pressed) the threshold is a sixteenth of
// SlowBytes and counts those pending bytes too (shedQoS0Locked), counted as
// memory_pressure. QoS 1 and 2 count those bytes too (backedUpLocked), and the ones a Flush
// is writing; when the connection is backed up they are not written:
// they wait in the session's queue, bounded by Limits.QueueMessages and QueueBytes like
// an offline session's (beyond, the newest is refused, counted as queue_full, unless its
// publisher is held back instead: backpressure.go), and the
// session asks the connection to say when it has drained (Conn.NotifyDrained); the
// broker then calls Pump, which writes the next ones. Without this a client that never
// reads, with a Receive Maximum of 65,535, would have its whole window written into its
// connection's buffer: a gigabyte of 16 KiB messages, held by one idle client.
//
// The invariant that keeps a queued message from waiting for ever: while the session is
// online and its queue waits with room in the window, either its pending buffer holds
// bytes (whoever made it non-empty flushes it, and flushLocked asks for the notice), or a
// drain notice is asked for (awaitDrainLocked). Every acknowledged message stays in the
// window or the queue until the client acknowledges it in turn.
func (s *Session) Deliver(d Delivery, now int64) (dirtied bool, drop Drop) {
	dirtied, drop, _ = s.DeliverStored(d, now)
	return dirtied, drop
}

// DeliverStored is Deliver that also reports whether the session stored the message: it is
// persistent and took it at QoS 1 or 2, so the publisher's acknowledgement must wait for
// the store (Session.SendDurable).
func (s *Session) DeliverStored(d Delivery, now int64) (dirtied bool, drop Drop, stored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, _, alive := d.Msg.Remaining(now); !alive {
		return false, DropExpired, false
	}
	if d.QoS == 0 {
		if s.conn == nil {
			return false, DropOffline, false
		}
		if drop := s.shedQoS0Locked(); drop != Delivered {
			return false, drop, false
		}
		e := d.entry()
		dirtied, drop = s.writePublish(&e, now, false)
		s.releaseFlowsIfIdle() // an alias may have been assigned and taken back
		return dirtied, drop, false
	}
	// The window and the queue keep the message: the caller passes an owned one so that
	// all recipients share it; a borrowed one is copied here as a fallback.
	d.Msg = d.Msg.Own()
	f := s.flows()
	persist := s.persistentLocked()
	if s.conn != nil && f.queueLen() == 0 && len(f.inflight) < int(s.clientRecvMax) && !s.backedUpLocked() {
		e := d.entry()
		e.pid = f.allocPID()
		off := s.outLen()
		dirtied, drop = s.writePublish(&e, now, false)
		if drop == Delivered {
			if persist {
				// The PUBLISH waits for its record: after a restart it is sent again
				// with this packet id (spec 4.3.3).
				s.putEntryLocked(f, &e, true, off)
			}
			e.msg.entryKept()
			f.inflight = append(f.inflight, e)
		} else {
			s.releaseFlowsIfIdle()
		}
		return dirtied, drop, persist && drop == Delivered
	}
	// The overflow policy: a full queue refuses the newest message (counted as queue_full
	// by the caller); what is queued already, which its publisher may have been told is
	// safe, stays. Under backpressure the message is queued all the same and its
	// publisher held back (backpressure.go).
	if (f.queueLen() >= s.lim.QueueMessages || f.queueBytes+d.Msg.Size() > s.lim.QueueBytes) && !s.overfillLocked(f, &d) {
		s.releaseFlowsIfIdle()
		return false, DropQueueFull, false
	}
	e := d.entry()
	if persist {
		s.putEntryLocked(f, &e, true, -1)
	}
	e.msg.entryKept()
	f.push(e)
	s.awaitDrainLocked()
	if s.conn == nil && d.Msg.Expiry != 0 {
		s.watchLocked() // it may expire before the client is back (sweep.go)
	}
	return false, Delivered, persist
}

// shedQoS0Locked reports whether a QoS 0 message is to be shed, and why: more than
// SlowBytes wait in the connection, or, under memory pressure, more than SlowBytes/16
// wait in the connection and the pending buffer together. Under pressure the pending
// bytes count because a round (64 KiB of input) fans out into every subscriber's pending
// buffer before any of them is flushed: with hundreds of slow subscribers that is tens
// of MiB in one round. s.conn is not nil; s's lock is held.
func (s *Session) shedQoS0Locked() Drop {
	n := s.conn.Buffered()
	switch {
	case s.lim.SlowBytes > 0 && n > s.lim.SlowBytes:
		return DropSlowConsumer
	case s.lim.Pressed != nil && n+s.outLen() > s.lim.SlowBytes/pressureSlowDiv && s.lim.Pressed():
		return DropPressure
	}
	return Delivered
}

// pressureSlowDiv divides SlowBytes under memory pressure: 4 KiB at the 64 KiB default,
// a few small messages, so that a consumer keeping up still gets a round's burst while a
// backed-up one gets nothing more held for it.
const pressureSlowDiv = 16

// backedUpLocked reports whether the connection is backed up: more than Limits.SlowBytes
// wait to be sent, in the connection, in the pending buffer or in a Flush's hands (see
// Deliver). s.conn is not nil; s's lock is held.
func (s *Session) backedUpLocked() bool {
	return s.lim.SlowBytes > 0 && s.conn.Buffered()+s.outLen()+int(s.inWrite)<<10 > s.lim.SlowBytes
}

// awaitDrainLocked asks the connection for a drain notice when queued messages wait for
// it to drain: the window has room, and nothing is pending here (pending bytes ask for it
// when they are flushed). s's lock is held.
func (s *Session) awaitDrainLocked() {
	if f := s.fl; f != nil && s.conn != nil && s.out == nil && f.queueLen() > 0 && len(f.inflight) < int(s.clientRecvMax) {
		s.conn.NotifyDrained()
	}
}

// Pump writes queued messages into the receive window while it has room and the
// connection c is not backed up; the broker calls it when c has drained (see Deliver). It
// does nothing if c is no longer the session's connection. It reports whether the session
// became dirty and the messages it dropped instead (expired, too large, denied).
func (s *Session) Pump(c Conn, now int64) (dirtied bool, dropped Drops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || c == nil {
		return false, dropped
	}
	dirtied = s.pumpLocked(now, &dropped)
	s.releaseFlowsIfIdle()
	return dirtied, dropped
}

// writePublish encodes e as a PUBLISH for this client: the per-recipient properties (the
// expiry left, subscription identifiers, a topic alias) next to the message's shared ones.
//
// A resend (dup) is never dropped for expiry: once onward delivery has started the
// message must be completed [MQTT-3.3.2-5], [MQTT-4.4.0-1]; it then carries the smallest
// expiry, 1 second.
func (s *Session) writePublish(e *entry, now int64, dup bool) (dirtied bool, drop Drop) {
	secs, has, alive := e.msg.Remaining(now)
	if !alive {
		if !dup {
			return false, DropExpired
		}
		secs = 1
	}
	p := packet.Publish{Topic: e.msg.Topic(), Payload: e.msg.Payload(), QoS: e.qos, PacketID: e.pid,
		Retain: e.flags&entryRetain != 0, Dup: dup}
	var ids [4]uint32
	if s.version == packet.V5 {
		p.RawProps = e.msg.Props()
		if has {
			p.Props.MessageExpiry = packet.Some(secs) // [MQTT-3.3.2-6]
		}
		if e.subID != 0 {
			p.Props.SubscriptionIDs = append(append(ids[:0], e.subID), e.more...)
		}
		if s.clientAliasMax > 0 {
			if s.aliasTopic(&p) && s.clientMaxPacket != 0 && uint32(p.Size(s.version)) > s.clientMaxPacket {
				// The client learns an alias only from a PUBLISH it receives: one that is
				// not sent must not leave its alias assigned.
				s.unaliasTopic(&p)
			}
		}
	}
	n := p.Size(s.version)
	if s.clientMaxPacket != 0 && uint32(n) > s.clientMaxPacket {
		return false, DropTooLarge // [MQTT-3.1.2-25]: discarded as if delivered
	}
	dirtied = s.out == nil
	if dirtied {
		s.out = bufpool.Get(n)
	} else {
		s.out = bufpool.Grow(s.out, n)
	}
	*s.out = p.AppendTo(*s.out, s.version)
	if s.lim.Sent != nil {
		s.lim.Sent[e.qos].Add(1)
	}
	return dirtied, Delivered
}

// aliasTopic replaces the topic by an alias the client already knows, or assigns a new
// one while the client's Topic Alias Maximum allows (spec 3.3.2.3.4), and reports whether
// it assigned one. Aliases are never reassigned: the first topics sent keep theirs for the
// connection's life.
func (s *Session) aliasTopic(p *packet.Publish) (assigned bool) {
	f := s.flows()
	if a, ok := f.aliasOut[string(p.Topic)]; ok {
		p.Props.TopicAlias = packet.Some(a)
		p.Topic = nil
		return false
	}
	if f.aliasNext >= s.clientAliasMax {
		return false
	}
	if f.aliasOut == nil {
		f.aliasOut = make(map[string]uint16)
	}
	f.aliasNext++
	f.aliasOut[string(p.Topic)] = f.aliasNext
	p.Props.TopicAlias = packet.Some(f.aliasNext)
	return true
}

// unaliasTopic takes back the alias aliasTopic has just assigned to p's topic.
func (s *Session) unaliasTopic(p *packet.Publish) {
	f := s.fl
	delete(f.aliasOut, string(p.Topic))
	if len(f.aliasOut) == 0 {
		f.aliasOut = nil
	}
	f.aliasNext--
	p.Props.TopicAlias = packet.Opt[uint16]{}
}

// pumpLocked moves queued messages into the receive window while it has room and the
// connection is not backed up; if it stops for the latter, a drain notice will resume it.
// It counts the messages it drops instead in dropped.
func (s *Session) pumpLocked(now int64, dropped *Drops) (dirtied bool) {
	f := s.fl
	if f == nil || s.conn == nil {
		return false
	}
	defer s.awaitDrainLocked()
	if f.waiting > 0 {
		dirtied = s.resendWaitingLocked(now, dropped)
	}
	persist := s.persistentLocked()
	// While entries wait, the window is full (resendWaitingLocked): none is taken here.
	for f.queueLen() > 0 && len(f.inflight) < int(s.clientRecvMax) && !s.backedUpLocked() {
		e := f.pop()
		if s.deniedLocked(&e) {
			s.dropEntryLocked(&e, persist, DropDenied, dropped)
			continue
		}
		e.pid = f.allocPID()
		off := s.outLen()
		d, drop := s.writePublish(&e, now, false)
		dirtied = dirtied || d
		if drop != Delivered {
			s.dropEntryLocked(&e, persist, drop, dropped)
			continue
		}
		if persist {
			s.putEntryLocked(f, &e, false, off)
		}
		f.inflight = append(f.inflight, e)
	}
	s.drainedLocked(f)
	return dirtied
}

// resumeLocked sends the inflight window again after a reconnect, in order: PUBREL for
// messages past PUBREC, PUBLISH with DUP for the others [MQTT-4.4.0-1], [MQTT-4.4.0-2],
// then pumps the queue.
//
// The client's Receive Maximum on the new connection bounds the resent PUBLISHes as it
// bounds new ones [MQTT-3.3.4-9], and it may be smaller than the window the messages were
// sent in. Released entries keep their slot until PUBCOMP, as they do while connected;
// the PUBLISHes beyond the room left wait in the window, flagged entryWaiting with their
// packet ids, and go (DUP) as acknowledgements free slots, before anything queued.
//
// It counts the messages it drops instead of sending them in dropped: those the read ACL
// in force denies, those the new connection's Maximum Packet Size cannot take, and what
// the pump drops.
func (s *Session) resumeLocked(now int64, dropped *Drops) bool {
	f := s.fl
	if f == nil {
		return false
	}
	dirtied := false
	persist := s.persistentLocked()
	room := int(s.clientRecvMax)
	for i := range f.inflight {
		if f.inflight[i].flags&entryReleased != 0 {
			room--
		}
	}
	f.waiting = 0
	keep := f.inflight[:0]
	for i := range f.inflight {
		e := f.inflight[i]
		e.flags &^= entryWaiting
		switch {
		case e.flags&entryReleased != 0:
			dirtied = s.sendLocked(&packet.Ack{PacketType: packet.PUBREL, PacketID: e.pid}) || dirtied
		case room <= 0:
			e.flags |= entryWaiting
			f.waiting++
		case s.deniedLocked(&e):
			s.dropEntryLocked(&e, persist, DropDenied, dropped)
			continue
		default:
			d, drop := s.writePublish(&e, now, true)
			dirtied = dirtied || d
			if drop != Delivered {
				s.dropEntryLocked(&e, persist, drop, dropped)
				continue
			}
			room--
		}
		keep = append(keep, e)
	}
	clear(f.inflight[len(keep):])
	f.inflight = keep
	dirtied = s.pumpLocked(now, dropped) || dirtied
	s.releaseFlowsIfIdle()
	return dirtied
}

// resendWaitingLocked sends the entries waiting since resumeLocked, in order, while the
// client's Receive Maximum has room: PUBLISH with DUP and the packet id each was first
// sent with [MQTT-4.4.0-1]. It counts the entries it drops in dropped (too large, denied).
func (s *Session) resendWaitingLocked(now int64, dropped *Drops) (dirtied bool) {
	f := s.fl
	persist := s.persistentLocked()
	for i := 0; i < len(f.inflight) && f.waiting > 0 && len(f.inflight)-int(f.waiting) < int(s.clientRecvMax); {
		e := &f.inflight[i]
		if e.flags&entryWaiting == 0 {
			i++
			continue
		}
		e.flags &^= entryWaiting
		f.waiting--
		if s.deniedLocked(e) {
			s.dropEntryLocked(e, persist, DropDenied, dropped)
			f.removeInflight(i)
			continue
		}
		d, drop := s.writePublish(e, now, true)
		dirtied = dirtied || d
		if drop != Delivered {
			s.dropEntryLocked(e, persist, drop, dropped)
			f.removeInflight(i)
			continue
		}
		i++
	}
	return dirtied
}

// deniedLocked reports whether the read ACL in force denies the session's owner e's
// message (Limits.MayRead): a message about to leave the session, from the queue or sent
// again, passes the ACL of that moment, which a reload or a restart may have narrowed
// since the message was delivered to the session. A released entry (PUBREC received)
// has no message left to check.
func (s *Session) deniedLocked(e *entry) bool {
	return s.lim.MayRead != nil && e.msg != nil && !s.lim.MayRead(s.username, s.realm, s.clientID, e.msg.Topic())
}

// dropEntryLocked drops e, taken out of the queue or the window, for reason why, counted
// in dropped: its record is deleted (persist), so that it does not come back after a
// restart, and its reference let go. Every entry the session drops goes through here.
func (s *Session) dropEntryLocked(e *entry, persist bool, why Drop, dropped *Drops) {
	if persist {
		s.deleteEntryLocked(e)
	}
	e.done()
	dropped.add(why)
}

// Ack handles a PUBACK, PUBREC or PUBCOMP from the client for an outbound message. It
// answers a PUBREC with PUBREL (0x92 for an unknown packet id, spec 4.3.3), frees the
// window slot on PUBACK, PUBCOMP or a failed PUBREC, and pumps the queue. It reports
// whether the session became dirty and the messages the pump dropped.
func (s *Session) Ack(a *packet.Ack, now int64) (dirtied bool, dropped Drops) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	i := -1
	if f != nil {
		i = f.findInflight(a.PacketID)
	}
	persist := s.persistentLocked()
	switch a.PacketType {
	case packet.PUBACK:
		if i < 0 || f.inflight[i].qos != 1 {
			return false, dropped // unknown or duplicate: nothing to do
		}
		if persist {
			s.deleteEntryLocked(&f.inflight[i])
		}
		f.inflight[i].done()
		f.removeInflight(i)
	case packet.PUBREC:
		if i < 0 || f.inflight[i].qos != 2 {
			return s.sendLocked(&packet.Ack{PacketType: packet.PUBREL, PacketID: a.PacketID, Code: packet.PacketIdentifierNotFound}), dropped
		}
		if a.Code.IsError() { // v5: the client refused the message; the exchange ends
			if persist {
				s.deleteEntryLocked(&f.inflight[i])
			}
			f.inflight[i].done()
			f.removeInflight(i)
			break
		}
		e := &f.inflight[i]
		if e.flags&entryWaiting != 0 {
			// Received on the earlier connection: it need not be sent again.
			e.flags &^= entryWaiting
			f.waiting--
		}
		if e.flags&entryReleased == 0 {
			e.flags |= entryReleased
			if persist {
				// After a restart the exchange goes on with PUBREL, never a second
				// PUBLISH: the PUBREL waits for the record that says so.
				s.releaseEntryLocked(f, e)
			}
			e.done() // the client has the message: only its id is kept (spec 4.3.3)
		}
		return s.sendLocked(&packet.Ack{PacketType: packet.PUBREL, PacketID: a.PacketID}), dropped
	case packet.PUBCOMP:
		if i < 0 || f.inflight[i].flags&entryReleased == 0 {
			return false, dropped
		}
		if persist {
			s.deleteEntryLocked(&f.inflight[i])
		}
		f.removeInflight(i)
	}
	dirtied = s.pumpLocked(now, &dropped)
	s.releaseFlowsIfIdle()
	return dirtied, dropped
}

// ReceiveQoS2 records an inbound QoS 2 PUBLISH's packet id until its PUBREL. dup reports
// that the id is already awaiting PUBREL: the message was received before and must not be
// delivered again (spec 4.3.3, method A). full reports that the broker's receive maximum
// is exceeded [MQTT-3.3.4-9].
func (s *Session) ReceiveQoS2(pid uint16) (dup, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows()
	for _, id := range f.awaitRel {
		if id == pid {
			return true, false
		}
	}
	if len(f.awaitRel) >= int(s.lim.ReceiveMaximum) {
		return false, true
	}
	f.awaitRel = append(f.awaitRel, pid)
	if s.persistentLocked() {
		// A resent PUBLISH with this id must be known as one after a restart too.
		s.stageInboundLocked(pid, true)
	}
	return false, false
}

// Release handles a PUBREL: it forgets the packet id and reports whether it was known.
func (s *Session) Release(pid uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	if f == nil {
		return false
	}
	for i, id := range f.awaitRel {
		if id == pid {
			f.awaitRel = append(f.awaitRel[:i], f.awaitRel[i+1:]...)
			if len(f.awaitRel) == 0 {
				f.awaitRel = nil
			}
			if s.persistentLocked() {
				// The PUBCOMP waits: a client that reuses the id after it must not find it
				// still awaiting PUBREL after a restart (its message would pass for a
				// duplicate and be lost).
				s.stageInboundLocked(pid, false)
			}
			s.releaseFlowsIfIdle()
			return true
		}
	}
	return false
}

// Errors of inbound topic aliases (spec 3.3.2.3.4).
var (
	ErrAliasInvalid = &packet.Error{Code: packet.TopicAliasInvalid, Rule: "MQTT-3.3.2-9", Text: "topic alias above the maximum"}
	ErrAliasUnknown = &packet.Error{Code: packet.ProtocolError, Rule: "MQTT-3.3.2-10", Text: "topic alias not set on this connection"}
)

// ResolveTopic returns the topic of an inbound PUBLISH, setting or using its topic alias.
func (s *Session) ResolveTopic(p *packet.Publish) ([]byte, error) {
	if !p.Props.TopicAlias.Set {
		return p.Topic, nil
	}
	a := p.Props.TopicAlias.V
	if a > s.lim.TopicAliasMaximum {
		return nil, ErrAliasInvalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows()
	if len(p.Topic) > 0 {
		if f.aliasIn == nil {
			f.aliasIn = make(map[uint16][]byte)
		}
		if old, ok := f.aliasIn[a]; !ok || string(old) != string(p.Topic) {
			f.aliasIn[a] = append([]byte(nil), p.Topic...)
		}
		return p.Topic, nil
	}
	t, ok := f.aliasIn[a]
	if !ok {
		return nil, ErrAliasUnknown
	}
	return t, nil
}

// Waiting reports whether queued messages wait beside room in the receive window, for a
// backed-up connection to drain (see Deliver). For tests.
func (s *Session) Waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	return f != nil && f.queueLen() > 0 && len(f.inflight) < int(s.clientRecvMax)
}

// Pending reports the inflight and queued counts, for tests and metrics.
func (s *Session) Pending() (inflight, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fl == nil {
		return 0, 0
	}
	return len(s.fl.inflight), s.fl.queueLen()
}
