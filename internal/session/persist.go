package session

import (
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// What a persistent session stages (journal.go explains the staging), by the method
// that makes the change in memory, always under the session's lock:
//
//	Attach, SetExpiry       session record; all records when the session becomes
//	                        persistent, none (deleted) when it stops being so
//	AddSub, RemoveSub       session record, output held (the SUBACK/UNSUBACK)
//	Detach                  session record with the time it went offline
//	DeliverStored           queue entry, queued or sent; output held when sent
//	pump (Ack, Pump, Attach) queue entry sent; output held
//	Ack                     entry deleted (PUBACK, PUBCOMP), released (PUBREC: held,
//	                        the PUBREL follows)
//	ReceiveQoS2, Release    inbound packet id put, deleted; output held
//	TakeWill, SetPendingWill, PendingWill   will deleted, put with its due time, deleted
//	Clear, End              session deleted, with every record of it
//	sweepExpired            entries of expired queued messages deleted (sweep.go)
//
// The session record carries the subscriptions, so a SUBSCRIBE rewrites it whole: a
// session with thousands of subscriptions would want a record per subscription, which
// the store's format does not have yet.

// persistentLocked reports whether s's state goes to the store: a journal is configured,
// the session outlives its connection (expiry above 0) and has not ended.
func (s *Session) persistentLocked() bool {
	return s.lim.Journal != nil && s.expiry != 0 && !s.ended
}

// Persistent reports whether the session's state is kept in the store.
func (s *Session) Persistent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.persistentLocked()
}

// recordLocked is the session's store record; disconnectedAt is when it went offline,
// 0 while it is connected.
func (s *Session) recordLocked(disconnectedAt int64) store.SessionRecord {
	r := store.SessionRecord{ClientID: s.clientID, DisconnectedAt: disconnectedAt, Expiry: s.expiry,
		Version: byte(s.version)}
	if s.realm != NoRealm {
		r.Owned, r.Username = true, s.username
		if int(s.realm) < len(s.lim.Realms) {
			r.Realm = s.lim.Realms[s.realm]
		}
	}
	if subs := s.subs.all(); len(subs) > 0 {
		r.Subscriptions = make([]store.SubRecord, len(subs))
		for i := range subs {
			sub := &subs[i]
			r.Subscriptions[i] = store.SubRecord{Filter: sub.Filter, ID: sub.ID, QoS: sub.Opts.QoS,
				NoLocal: sub.Opts.NoLocal, RetainAsPublished: sub.Opts.RetainAsPublished,
				RetainHandling: sub.Opts.RetainHandling}
		}
	}
	return r
}

// record is w as the store keeps it.
func (w *Will) record() store.WillRecord {
	m := w.Msg
	return store.WillRecord{Topic: m.topic, Payload: m.payload, Props: m.props, Deadline: w.Due,
		Delay: w.Delay, MessageExpiry: w.Expiry, QoS: m.QoS, Retain: m.Retain}
}

// stageSubsLocked writes the session record after a change of subscriptions and holds
// the output (the SUBACK or UNSUBACK about to be sent) until it is durable.
func (s *Session) stageSubsLocked() {
	if !s.persistentLocked() {
		return
	}
	j := s.lim.Journal
	j.begin().PutSession(s.recordLocked(0))
	s.holdMarkLocked(j, s.outLen())
	j.end()
}

// restageLocked stages what a change of persistence needs, was being whether the
// session was persistent before the change: its record again if it still is (and the
// current connection's will if attach), every record if it has just become persistent,
// none if it has stopped being so.
func (s *Session) restageLocked(was, attach bool) {
	now := s.persistentLocked()
	if !was && !now {
		return
	}
	j := s.lim.Journal
	b := j.begin()
	defer j.end()
	switch {
	case was && now:
		b.PutSession(s.recordLocked(0))
		if !attach {
			return
		}
		if s.will != nil {
			b.PutWill(s.clientID, s.will.record())
		} else {
			b.DeleteWill(s.clientID)
		}
	case now:
		s.writeAllLocked(b, j, writeNew)
	default:
		s.dropAllLocked(b, j)
	}
}

// How writeEntryLocked treats the message of an entry.
const (
	writeNew     = iota // a new reference: counted, the message stored if it is not
	writeUpdate         // the entry changed state: its reference is counted already
	writeRewrite        // the resync: the message written again too
)

// writeAllLocked stages every record of the session: when it becomes persistent
// (writeNew: entries numbered and their messages referenced) or for the resync
// (writeRewrite, after a DeleteSession).
func (s *Session) writeAllLocked(b *store.Batch, j *Journal, mode int) {
	// Written as connected: an offline session's expiry then counts from the next Load,
	// the time it went offline being unknown here. Only the resync writes an offline one.
	b.PutSession(s.recordLocked(0))
	switch {
	case s.will != nil:
		b.PutWill(s.clientID, s.will.record())
	case s.pending != nil:
		b.PutWill(s.clientID, s.pending.record())
	}
	f := s.fl
	if f == nil {
		return
	}
	for i := range f.inflight {
		s.writeEntryLocked(b, j, f, &f.inflight[i], mode)
	}
	for i := f.qhead; i < len(f.queue); i++ {
		s.writeEntryLocked(b, j, f, &f.queue[i], mode)
	}
	for _, pid := range f.awaitRel {
		b.PutInbound(s.clientID, pid)
	}
}

// dropAllLocked stages the deletion of every record of the session and drops its
// entries' references.
func (s *Session) dropAllLocked(b *store.Batch, j *Journal) {
	b.DeleteSession(s.clientID)
	f := s.fl
	if f == nil {
		return
	}
	for i := range f.inflight {
		j.unrefLocked(b, f.inflight[i].msg)
	}
	for i := f.qhead; i < len(f.queue); i++ {
		j.unrefLocked(b, f.queue[i].msg)
	}
}

// Rewrite stages every record of a persistent session again, replacing what the store
// has: the broker's resync after a failed commit (journal.go).
func (s *Session) Rewrite() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.persistentLocked() {
		return
	}
	j := s.lim.Journal
	b := j.begin()
	b.DeleteSession(s.clientID)
	s.writeAllLocked(b, j, writeRewrite)
	j.end()
}

// writeEntryLocked stages entry e's queue record. j.mu is held.
func (s *Session) writeEntryLocked(b *store.Batch, j *Journal, f *flows, e *entry, mode int) {
	if mode == writeNew {
		d := f.durable()
		d.nextSeq++
		e.seq = d.nextSeq
	}
	var id uint64
	switch {
	case e.msg == nil: // released: only the packet id matters
	case mode == writeNew:
		id = j.refLocked(b, e.msg)
	case mode == writeRewrite && e.msg.sid != 0:
		id = e.msg.sid
		b.PutMessage(id, e.msg.record())
	default:
		id = e.msg.sid
	}
	var ids [4]uint32
	subIDs := ids[:0]
	if e.subID != 0 {
		subIDs = append(append(subIDs, e.subID), e.more...)
	}
	state := store.StateSent
	switch {
	case e.pid == 0:
		state = store.StateQueued
	case e.flags&entryReleased != 0:
		state = store.StateReleased
	}
	b.PutQueued(s.clientID, e.seq, store.QueuedRecord{MessageID: id, SubIDs: subIDs, PacketID: e.pid,
		QoS: e.qos, Retain: e.flags&entryRetain != 0, State: state})
}

// putEntryLocked stages e's record: a new entry (numbered, its message referenced) or a
// change of its state. With holdOff ≥ 0 the output is held from that offset on: the
// caller has just encoded the PUBLISH (or the PUBREL) the record describes.
func (s *Session) putEntryLocked(f *flows, e *entry, isNew bool, holdOff int) {
	j := s.lim.Journal
	b := j.begin()
	mode := writeUpdate
	if isNew {
		mode = writeNew
	}
	s.writeEntryLocked(b, j, f, e, mode)
	if holdOff >= 0 && s.conn != nil {
		s.holdLocked(j, f, holdOff)
	}
	j.end()
}

// deleteEntryLocked stages the deletion of e's record and drops the store's reference to
// its message (Journal.unrefLocked); the entry's own is the caller's to let go (entry.done,
// dropEntryLocked).
func (s *Session) deleteEntryLocked(e *entry) {
	j := s.lim.Journal
	b := j.begin()
	b.DeleteQueued(s.clientID, e.seq)
	j.unrefLocked(b, e.msg)
	j.end()
}

// releaseEntryLocked stages e's move to the released state (PUBREC received): the message
// reference is dropped, and the output held for the PUBREL about to be encoded.
func (s *Session) releaseEntryLocked(f *flows, e *entry) {
	j := s.lim.Journal
	b := j.begin()
	j.unrefLocked(b, e.msg)
	b.PutQueued(s.clientID, e.seq, store.QueuedRecord{PacketID: e.pid, QoS: e.qos,
		Retain: e.flags&entryRetain != 0, State: store.StateReleased})
	if s.conn != nil {
		s.holdLocked(j, f, s.outLen())
	}
	j.end()
}

// stageInboundLocked stages an inbound QoS 2 packet id awaiting PUBREL (add) or its
// release; the output is held for the PUBREC or PUBCOMP that follows. Releasing marks
// the PUBCOMP: it cannot say that it failed, so a failure closes the connection.
func (s *Session) stageInboundLocked(pid uint16, add bool) {
	j := s.lim.Journal
	b := j.begin()
	defer j.end()
	if add {
		b.PutInbound(s.clientID, pid)
		if s.conn != nil {
			s.holdLocked(j, s.flows(), s.outLen()) // SendDurable marks the PUBREC
		}
		return
	}
	b.DeleteInbound(s.clientID, pid)
	s.holdMarkLocked(j, s.outLen())
}

// subRecordSub converts a stored subscription.
func subRecordSub(r *store.SubRecord) Sub {
	return Sub{Filter: r.Filter, ID: r.ID, Opts: SubOpts{QoS: r.QoS, NoLocal: r.NoLocal,
		RetainAsPublished: r.RetainAsPublished, RetainHandling: r.RetainHandling}}
}
