package bridge

import (
	"log/slog"
	"strings"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// The queue in the store
//
// With the broker's store on, a bridge's QoS 1 and 2 messages for the remote are kept in it,
// as a persistent session's queue is: the same records (a session record, an entry per
// message in seq order, a message record per entry), under the client id
// "\x00bridge/<name>", which no MQTT client can take (broker.OwnedPrefix). The tap stages
// a message's entry on the publisher's goroutine, in the publish path's batch, and
// reports it stored: the publisher's PUBACK is held until that batch is durable under
// the store's sync policy, as for a message a persistent session queued. The remote's
// PUBACK (PUBCOMP at QoS 2) deletes the entry and its message, committed by the bridge's
// reader without waiting. At start the bridge takes its entries back (Restore found them) and sends
// them first, in seq order: they were acknowledged locally before anything newer.
//
// Why a session's records and not a format of the bridge's own: the store, both engines,
// already keeps, orders, sweeps (an entry whose message expired unsent, a message nobody
// refers to) and loads them, group-commits them with the sessions' changes, and the
// broker's resync rewrites them after a failed commit; a second queue format would repeat
// all of that. Why not a real session.Session with the bridge as its connection: a
// session encodes PUBLISHes under the local topic name with its own packet ids and
// aliases, and the bridge sends under the remote name and its own window; the bridge
// would have to rewrite every encoded packet. The price of keeping the bridge's own
// queue: a message that a persistent session also queues is stored twice (the bridge's
// record carries the remote topic name). A QoS 2 message's packet id is stored (its
// entry's state sent) before its PUBLISH leaves (conn.awaitSent), so a restart sends it
// again under it, with DUP; a QoS 1 message in flight at a restart is sent again as a
// new PUBLISH. Every message found at start is counted in restored.
//
// Not stored: QoS 0 messages (lost at a restart, as a persistent session's QoS 0 are
// never stored either), and anything with the store off (store.dir: off): the queue is
// then in memory only, with the same bounds.

// ownedID is the owned queue's client id of the bridge called name.
func ownedID(name string) string { return broker.OwnedPrefix + "bridge/" + name }

// restore takes back the entries Restore found, oldest first, as waiting messages. What
// exceeds the queue's bounds (lowered since they were stored) is dropped, newest first,
// and its entries deleted; restore returns how many were kept and dropped. q.mu is not
// held; nothing else uses q yet.
func (q *queue) restore(es []broker.OwnedEntry) (kept, dropped int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range es {
		e := &es[i]
		r := &e.Msg
		m := newMsg(string(r.Topic), r.Payload, r.Props, r.Expiry, r.QoS, r.Retain)
		m.seq, m.sid = e.Seq, e.ID
		q.seq = max(q.seq, e.Seq)
		if q.len() >= q.maxMsgs || q.bytes+m.size() > q.maxBytes {
			q.j.StageOwnedDone(q.cid, m.seq, m.sid)
			dropped++
			continue
		}
		if e.PacketID != 0 {
			// Sent before the restart: in flight again under its id, sent again first
			// with DUP.
			m.id, m.dup = e.PacketID, true
			q.lastID = max(q.lastID, m.id)
			q.inflight = append(q.inflight, m)
		} else {
			q.pending = append(q.pending, m)
		}
		q.bytes += m.size()
		q.stored++
		kept++
	}
	return kept, dropped
}

// rewrite stages the queue's records whole again, for the broker's resync after a failed
// commit: the old ones deleted, then the owner, then every stored entry, in flight or
// waiting, with its message.
func (q *queue) rewrite() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.j.StageOwnerGone(q.cid, nil)
	q.j.StageOwner(q.cid)
	for _, m := range q.inflight {
		if m.sid != 0 {
			q.j.StageOwnedEntry(q.cid, m.seq, m.sid, m.record())
			if m.qos == 2 {
				q.j.StageOwnedSent(q.cid, m.seq, m.sid, m.id, m.qos, m.retain)
			}
		}
	}
	for _, m := range q.pending[q.head:] {
		if m.sid != 0 {
			q.j.StageOwnedEntry(q.cid, m.seq, m.sid, m.record())
		}
	}
}

// DropStale deletes from b's store the queues of bridges no longer configured (Restore
// found them, no bridge took them), logging what each held. Start calls it; so does the
// embedding broker when it starts no bridge.
func DropStale(b *broker.Broker, log *slog.Logger) {
	for cid, n := range b.DropUnowned() {
		name, _ := strings.CutPrefix(cid, ownedID(""))
		log.Warn("bridge: the stored queue of a bridge no longer configured deleted", "bridge", name, "messages", n)
	}
}
