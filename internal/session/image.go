package session

import (
	"fmt"

	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// Moving a session between cluster nodes: the old owner exports it into a store.Image
// (the records the store would keep of it), the new owner imports it. The image carries
// what a restart would find in the store: subscriptions, expiry, the inflight window both
// ways (sent QoS 1/2 messages with their packet ids, PUBRELs awaited, inbound QoS 2 ids),
// the queue, and a will waiting for its delay. Like the store, it leaves out the shared
// subscription an entry came through and topic aliases.

// Export writes the session into im. The session should be offline (Detach): a
// connection's will is not exported, only a pending one.
func (s *Session) Export(im *store.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fl
	var entries []*entry
	if f != nil {
		for i := range f.inflight {
			entries = append(entries, &f.inflight[i])
		}
		for i := f.qhead; i < len(f.queue); i++ {
			entries = append(entries, &f.queue[i])
		}
	}
	for i, e := range entries {
		if e.msg != nil {
			r := e.msg.record()
			im.Message(uint64(i+1), &r)
		}
	}
	rec := s.recordLocked(0)
	im.Session(&rec)
	var ids [4]uint32
	for i, e := range entries {
		subIDs := ids[:0]
		if e.subID != 0 {
			subIDs = append(append(subIDs, e.subID), e.more...)
		}
		q := store.QueuedRecord{SubIDs: subIDs, PacketID: e.pid, QoS: e.qos, Retain: e.flags&entryRetain != 0,
			State: store.StateSent}
		switch {
		case e.flags&entryReleased != 0:
			q.State = store.StateReleased
		case e.pid == 0:
			q.State = store.StateQueued
		}
		if e.msg != nil {
			q.MessageID = uint64(i + 1)
		}
		im.Queued(uint64(i+1), &q)
	}
	if f != nil {
		for _, pid := range f.awaitRel {
			im.Inbound(pid)
		}
	}
	if w := s.pending; w != nil {
		r := w.record()
		im.Will(&r)
	}
}

// Import returns the offline session an image describes, with handle id, and its will
// waiting for its delay (nil if none; the session keeps it as PendingWill would return
// it). A persistent session is staged into lim's Journal whole, as new. The caller enters
// its subscriptions in the index.
func Import(id uint32, data []byte, lim *Limits) (*Session, error) {
	v := importer{id: id, lim: lim, msgs: map[uint64]*Message{}}
	if err := store.LoadImage(data, &v); err != nil {
		return nil, err
	}
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = v.will
	if s.persistentLocked() {
		j := lim.Journal
		b := j.begin()
		b.DeleteSession(s.clientID)
		s.writeAllLocked(b, j, writeNew)
		j.end()
	}
	return s, nil
}

// importer is Import's store.Visitor.
type importer struct {
	id   uint32
	lim  *Limits
	msgs map[uint64]*Message
	s    *Session
	will *Will
}

func (v *importer) Message(id uint64, r store.MessageRecord) error {
	m := RestoredMessage(id, &r)
	m.sid = 0 // the image's number, not this store's
	v.msgs[id] = m
	return nil
}

func (v *importer) Session(r store.SessionRecord) error {
	if v.s != nil {
		return fmt.Errorf("session: image of two sessions")
	}
	v.s = Restore(v.id, &r, v.lim)
	return nil
}

func (v *importer) Queued(_ string, seq uint64, r store.QueuedRecord) error {
	var m *Message
	if r.State != store.StateReleased {
		if m = v.msgs[r.MessageID]; m == nil {
			return fmt.Errorf("session: image entry %d refers to missing message %d", seq, r.MessageID)
		}
	}
	v.s.mu.Lock()
	v.s.restoreQueuedLocked(seq, &r, m)
	v.s.mu.Unlock()
	return nil
}

func (v *importer) Inbound(_ string, pid uint16) error {
	v.s.RestoreInbound(pid)
	return nil
}

func (v *importer) Will(_ string, r store.WillRecord) error {
	v.will = RestoredWill(&r)
	return nil
}

func (v *importer) Retained(string, uint64) error { return nil }
