package session

import (
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// Rebuilding sessions from the store at startup, before any client connects. The broker
// visits the store (store.Visitor) and calls these in the order Load gives: messages,
// then each session followed by its queue, inbound ids and will.

// RestoredMessage returns the message with store id id, as Load gives it.
func RestoredMessage(id uint64, r *store.MessageRecord) *Message {
	p := packet.Publish{Topic: r.Topic, Payload: r.Payload, QoS: r.QoS, Retain: r.Retain}
	var m Message
	m.Borrow(&p, r.Topic, 0, time.Time{}, nil) // no expiry property: set below
	m.props = r.Props
	o := m.Own()
	o.Expiry = r.Expiry
	o.sid = id
	return o
}

// StoreID is the message's id in the store, 0 if it is not stored; for tests.
func (m *Message) StoreID() uint64 { return m.sid }

// Restore returns the offline session that r describes, with its subscriptions (which
// the caller enters in the index). id is its subscriber handle.
func Restore(id uint32, r *store.SessionRecord, lim *Limits) *Session {
	s := New(id, r.ClientID, lim)
	s.expiry = r.Expiry
	s.version = packet.Version(r.Version)
	s.username, s.realm = r.Username, ownerRealm(r, lim)
	s.clientRecvMax = lim.ReceiveMaximum
	if len(r.Subscriptions) > 0 {
		subs := make([]Sub, len(r.Subscriptions))
		for i := range r.Subscriptions {
			subs[i] = subRecordSub(&r.Subscriptions[i])
		}
		s.subs = newSubSet(subs)
	}
	return s
}

// ownerRealm is the realm of r's owner in lim's numbering: NoRealm for a record without
// an owner (format 1) or whose realm this broker does not have.
func ownerRealm(r *store.SessionRecord, lim *Limits) uint8 {
	switch {
	case !r.Owned:
		return NoRealm
	case r.Realm == "":
		return 0
	}
	for i, name := range lim.Realms {
		if i > 0 && i < int(NoRealm) && name == r.Realm {
			return uint8(i)
		}
	}
	return NoRealm
}

// RestoreQueued puts back queue entry seq; m is the message it refers to, nil for a
// released entry (PUBREC received), which needs none. Entries come in seq order; sent
// and released ones go back into the inflight window, to be sent again on reconnect
// (PUBLISH with DUP, or PUBREL) with their packet ids [MQTT-4.4.0-1].
func (s *Session) RestoreQueued(seq uint64, r *store.QueuedRecord, m *Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.lim.Journal
	if m != nil && j != nil {
		j.mu.Lock()
		j.refs[m.sid]++
		j.mu.Unlock()
	}
	s.restoreQueuedLocked(seq, r, m)
}

// restoreQueuedLocked puts back queue entry seq in memory only.
func (s *Session) restoreQueuedLocked(seq uint64, r *store.QueuedRecord, m *Message) {
	f := s.flows()
	d := f.durable()
	d.nextSeq = max(d.nextSeq, seq)
	e := entry{msg: m, seq: seq, qos: r.QoS, pid: r.PacketID}
	if r.Retain {
		e.flags |= entryRetain
	}
	if len(r.SubIDs) > 0 {
		e.subID = r.SubIDs[0]
		if len(r.SubIDs) > 1 {
			e.more = append([]uint32(nil), r.SubIDs[1:]...)
		}
	}
	switch r.State {
	case store.StateQueued:
		e.pid = 0
		f.push(e)
		if m != nil && m.Expiry != 0 {
			s.watchLocked() // restored sessions are offline (sweep.go)
		}
	case store.StateReleased:
		e.msg = nil
		e.flags |= entryReleased
		f.inflight = append(f.inflight, e)
	default:
		f.inflight = append(f.inflight, e)
	}
}

// RestoreInbound puts back an inbound QoS 2 packet id awaiting PUBREL.
func (s *Session) RestoreInbound(pid uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows()
	f.awaitRel = append(f.awaitRel, pid)
}

// RestoredWill returns the will that r describes; its Due is r.Deadline (0: the client
// was connected when the broker stopped).
func RestoredWill(r *store.WillRecord) *Will {
	p := packet.Publish{Topic: r.Topic, Payload: r.Payload, QoS: r.QoS, Retain: r.Retain}
	var m Message
	m.Borrow(&p, r.Topic, 0, time.Time{}, nil) // no expiry property: set below
	m.props = r.Props
	return &Will{Msg: m.Own(), Delay: r.Delay, Expiry: r.MessageExpiry, Due: r.Deadline}
}

// TrimQueue applies the queue bounds to a restored session (they may have been lowered
// since its queue was stored): the newest entries beyond them are dropped and their
// records deleted. It returns how many were dropped.
func (s *Session) TrimQueue() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	if f == nil {
		return 0
	}
	var ds Drops
	persist := s.persistentLocked()
	for f.queueLen() > 0 && (f.queueLen() > s.lim.QueueMessages || f.queueBytes > s.lim.QueueBytes) {
		last := len(f.queue) - 1
		e := f.queue[last]
		f.queue[last] = entry{}
		f.queue = f.queue[:last]
		f.queueBytes -= e.msg.Size()
		s.dropEntryLocked(&e, persist, DropQueueFull, &ds)
	}
	s.releaseFlowsIfIdle()
	return int(ds[DropQueueFull])
}
