package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// Restore makes st the broker's store: it loads what st holds (persistent sessions with
// their subscriptions, queues, inflight messages, inbound packet ids and wills; retained
// messages) and from then on keeps it there (persist.go). Call it once, after New and
// before Start, so that everything is back before a listener accepts a client. The broker
// does not close st.
//
// The restore order is the store's (store.Visitor): every message first, then each
// session followed by its queue entries (in order), inbound ids and will, then the
// retained topics. Then time is applied to what was loaded:
//   - a session whose expiry ran out while the broker was down (counted from when it went
//     offline, or from now if it was connected when the broker stopped) is ended, and its
//     records deleted; its will, if any, is published first;
//   - a will whose delay ran out is published, the others are scheduled again;
//   - queue bounds apply (queue.offline_messages, queue.offline_bytes): what exceeds them,
//     newest first, is dropped and counted as queue_full;
//   - expired messages that were never sent were swept by Load [MQTT-3.3.2-5], and are
//     counted as expired; those that expire later are dropped by the expiry sweep
//     (sweep.go) or when their session resumes, whichever comes first, as in memory.
//
// What was dropped is logged in one line, by reason, not one per session or message.
func (b *Broker) Restore(st store.Store) error {
	if b.j != nil {
		return errors.New("broker: Restore called twice")
	}
	start := time.Now()
	j := session.NewJournal(st, b.resync)
	b.j = j
	b.live.lim.Journal = j
	b.live.set.Store(newSettings(b.live.cfg, &b.live.lim))
	if err := b.stats.journal(j); err != nil {
		b.log.Warn("store: messages gauge not exported", "err", err)
	}
	r := restorer{b: b, msgs: make(map[uint64]*session.Message)}
	if err := st.Load(&r); err != nil {
		return fmt.Errorf("broker: restore: %w", err)
	}
	j.Restored(r.maxID)
	r.msgs = nil
	r.apply(time.Now())
	b.commitWait()
	b.droppedAtRestore(&r.dropped)
	b.log.Info("store: state restored", "sessions", len(r.sessions), "queued", r.queued,
		"retained", r.retained, "expired_sessions", r.expired, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// restorer is the store.Visitor, and ExpiryVisitor, of Restore.
type restorer struct {
	b        *Broker
	msgs     map[uint64]*session.Message // by store id, while Load runs
	maxID    uint64                      // the highest message id met
	cur      *restored                   // the session whose records Load is visiting
	curOwned string                      // or the owned queue (ownedqueue.go)
	sessions []restored
	queued   int
	retained int
	expired  int
	dropped  session.Drops // messages of sessions dropped, by reason
}

// restored is a session as Load returned it, for apply.
type restored struct {
	s              *session.Session
	will           *session.Will
	disconnectedAt int64
}

func (r *restorer) Message(id uint64, m store.MessageRecord) error {
	r.msgs[id] = session.RestoredMessage(id, &m)
	r.maxID = max(r.maxID, id)
	return nil
}

func (r *restorer) Session(rec store.SessionRecord) error {
	b := r.b
	if ownedID(rec.ClientID) {
		r.restoreOwned(rec.ClientID)
		return nil
	}
	r.curOwned = ""
	if b.sessions.m[rec.ClientID] != nil {
		return fmt.Errorf("%w: client %q twice", store.ErrCorrupt, rec.ClientID)
	}
	id := b.allocID(target{})
	s := session.Restore(id, &rec, &b.live.set.Load().lim)
	b.setTarget(id, target{s: s})
	b.sessions.m[rec.ClientID] = s
	for _, sub := range s.Subs() {
		b.indexSub(s, sub)
	}
	r.sessions = append(r.sessions, restored{s: s, disconnectedAt: rec.DisconnectedAt})
	r.cur = &r.sessions[len(r.sessions)-1]
	return nil
}

// session is the session of clientID's records, which Load visits right after it.
func (r *restorer) session(clientID string) (*restored, error) {
	if r.cur == nil || r.cur.s.ClientID() != clientID {
		return nil, fmt.Errorf("%w: records of client %q out of order", store.ErrCorrupt, clientID)
	}
	return r.cur, nil
}

func (r *restorer) Queued(clientID string, seq uint64, q store.QueuedRecord) error {
	if clientID == r.curOwned && clientID != "" {
		return r.ownedQueued(clientID, seq, &q)
	}
	rs, err := r.session(clientID)
	if err != nil {
		return err
	}
	var m *session.Message
	if q.State != store.StateReleased {
		if m = r.msgs[q.MessageID]; m == nil {
			return fmt.Errorf("%w: client %q entry %d refers to missing message %d", store.ErrCorrupt, clientID, seq, q.MessageID)
		}
	}
	r.maxID = max(r.maxID, q.MessageID)
	rs.s.RestoreQueued(seq, &q, m)
	r.queued++
	return nil
}

// Expired implements store.ExpiryVisitor: Load swept entry seq of clientID, whose
// message expired unsent. An owned queue's are its owner's (a bridge counts its own).
func (r *restorer) Expired(clientID string, seq uint64) error {
	if clientID == r.curOwned && clientID != "" {
		return nil
	}
	if _, err := r.session(clientID); err != nil {
		return err
	}
	r.dropped[session.DropExpired]++
	return nil
}

func (r *restorer) Inbound(clientID string, pid uint16) error {
	if clientID == r.curOwned && clientID != "" {
		return nil // an owned queue receives nothing
	}
	rs, err := r.session(clientID)
	if err != nil {
		return err
	}
	rs.s.RestoreInbound(pid)
	return nil
}

func (r *restorer) Will(clientID string, w store.WillRecord) error {
	if clientID == r.curOwned && clientID != "" {
		return nil // an owned queue has no will
	}
	rs, err := r.session(clientID)
	if err != nil {
		return err
	}
	rs.will = session.RestoredWill(&w)
	return nil
}

func (r *restorer) Retained(topic string, id uint64) error {
	m := r.msgs[id]
	if m == nil {
		return fmt.Errorf("%w: retained topic %q refers to missing message %d", store.ErrCorrupt, topic, id)
	}
	r.b.retained.mu.Lock()
	r.b.setRetainedLocked([]byte(topic), m)
	r.b.retained.mu.Unlock()
	r.b.j.RestoreRetained(m)
	r.retained++
	return nil
}

// apply applies time and the queue bounds to what Load returned (see Restore).
func (r *restorer) apply(now time.Time) {
	b := r.b
	b.retainedGauge()
	nowNs := now.UnixNano()
	for i := range r.sessions {
		rs := &r.sessions[i]
		s := rs.s
		if !b.live.limits.Load().backpressure { // under backpressure a queue past its bounds was acknowledged
			r.dropped[session.DropQueueFull] += uint32(s.TrimQueue())
		}
		offline := rs.disconnectedAt
		if offline == 0 {
			offline = nowNs // connected when the broker stopped: offline from now
		}
		end := int64(-1) // never
		if e := s.Expiry(); e != session.NoExpiry {
			end = offline + int64(e)*int64(time.Second)
		}
		ended := end >= 0 && end <= nowNs
		if w := rs.will; w != nil {
			due := w.Due
			if due == 0 {
				due = nowNs + int64(w.Delay)*int64(time.Second)
			}
			if end >= 0 {
				due = min(due, end) // the session's end publishes it [MQTT-3.1.3-9]
			}
			if ended || due <= nowNs {
				s.SetPendingWill(w, due)
				if w := s.PendingWill(); w != nil { // deletes its record
					bt := b.getBatch()
					b.publishWill(bt, w)
					b.endBatch(bt)
				}
			} else {
				b.scheduleWill(s, w, time.Duration(due-nowNs))
			}
		}
		switch {
		case ended:
			r.expired++
			b.endSession(s)
		case end >= 0:
			b.scheduleExpiry(s, time.Duration(end-nowNs))
		}
	}
}

// indexSub enters a subscription of a session that comes whole, restored from the store
// or handed over by another node (cluster_owner.go), in the index. Its filter was judged
// by an ACL that may not be the one in force (the files may have changed meanwhile): its
// deliveries are checked one by one unless the ACL in force covers it whole for the
// session's owner.
func (b *Broker) indexSub(s *session.Session, sub session.Sub) {
	var flags uint8
	if !b.covered(s, sub.Filter) {
		flags |= pubsub.CheckRead
	}
	if sub.Opts.NoLocal {
		flags |= pubsub.NoLocal
	}
	if sub.Opts.RetainAsPublished {
		flags |= pubsub.RetainAsPublished
	}
	if !b.indexSubscribe([]byte(sub.Filter), sub.Filter, pubsub.Sub{Subscriber: pubsub.SubscriberID(s.ID()), ID: sub.ID,
		QoS: sub.Opts.QoS, Flags: flags}, nil) {
		b.stats.subscriptions(1)
	}
}

// covered reports whether the ACL in force lets s's owner read every topic filter can
// match (auth.Covering), so that its deliveries need no check each.
func (b *Broker) covered(s *session.Session, filter string) bool {
	user, realm := s.Identity()
	if int(realm) >= len(b.realms.sec) {
		return false
	}
	a := b.realms.sec[realm].Authorizer
	if a == nil {
		return true
	}
	if _, f, shared := packet.SplitShared([]byte(filter)); shared {
		filter = string(f)
	}
	c, ok := a.(auth.Covering)
	return ok && c.Covers(user, s.ClientID(), filter)
}
