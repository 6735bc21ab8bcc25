package broker

import (
	"strings"
	"sync"

	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// OwnedPrefix starts the client id of every queue the store keeps for an owner other
// than a session (session/ownedqueue.go): U+0000, which no MQTT string may hold
// [MQTT-1.5.4-2], so no client can connect under such an id, and Restore tells these
// records from a client's.
const OwnedPrefix = "\x00"

// An OwnedEntry is one entry of an owned queue as Restore found it, in seq order.
type OwnedEntry struct {
	Seq, ID  uint64              // the entry's seq and its message's id in the store
	PacketID uint16              // the packet id it was sent under; 0: not sent
	Msg      store.MessageRecord // its slices are the entry's own
}

// ownedQueues are the owned queues Restore found, until their owners take them, and the
// owners' rewrite functions for the resync.
type ownedQueues struct {
	mu       sync.Mutex
	found    map[string][]OwnedEntry // client id → entries
	rewrites []func()
}

// Journal is the broker's journal, nil without a store: an owned queue stages into it.
func (b *Broker) Journal() *session.Journal { return b.j }

// TakeOwned returns the entries Restore found for the owned queue clientID, in seq
// order, and forgets them: the caller owns them and their records from now on.
func (b *Broker) TakeOwned(clientID string) []OwnedEntry {
	o := &b.owned
	o.mu.Lock()
	defer o.mu.Unlock()
	es := o.found[clientID]
	delete(o.found, clientID)
	return es
}

// DropUnowned deletes from the store the owned queues that Restore found and nobody
// took (a bridge removed from the config), and returns each one's client id and
// message count. Call it once every owner has taken its queue.
func (b *Broker) DropUnowned() map[string]int {
	o := &b.owned
	o.mu.Lock()
	found := o.found
	o.found = nil
	o.mu.Unlock()
	if len(found) == 0 || b.j == nil {
		return nil
	}
	gone := make(map[string]int, len(found))
	for cid, es := range found {
		ids := make([]uint64, len(es))
		for i := range es {
			ids[i] = es[i].ID
		}
		b.j.StageOwnerGone(cid, ids)
		gone[cid] = len(es)
	}
	b.commit()
	return gone
}

// OnResync registers fn, which stages an owned queue whole again (its records deleted
// first), for the resync after a failed commit (persist.go). fn runs with no lock of the
// broker held.
func (b *Broker) OnResync(fn func()) {
	o := &b.owned
	o.mu.Lock()
	o.rewrites = append(o.rewrites, fn)
	o.mu.Unlock()
}

// rewriteOwned runs the owners' rewrite functions, for the resync.
func (b *Broker) rewriteOwned() {
	o := &b.owned
	o.mu.Lock()
	fns := o.rewrites[:len(o.rewrites):len(o.rewrites)]
	o.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func ownedID(clientID string) bool { return strings.HasPrefix(clientID, OwnedPrefix) }

// restoreOwned starts the owned queue clientID at Load.
func (r *restorer) restoreOwned(clientID string) {
	o := &r.b.owned
	o.mu.Lock()
	if o.found == nil {
		o.found = make(map[string][]OwnedEntry)
	}
	o.found[clientID] = nil
	o.mu.Unlock()
	r.cur, r.curOwned = nil, clientID
}

// ownedQueued adds an entry of the owned queue that Load is visiting.
func (r *restorer) ownedQueued(clientID string, seq uint64, q *store.QueuedRecord) error {
	m := r.msgs[q.MessageID]
	if m == nil || q.State == store.StateReleased {
		return nil // an owned queue holds no released entries; a missing message is swept
	}
	e := OwnedEntry{Seq: seq, ID: q.MessageID, Msg: store.MessageRecord{Topic: m.Topic(), Payload: m.Payload(),
		Props: m.Props(), Expiry: m.Expiry, QoS: q.QoS, Retain: q.Retain}}
	if q.State == store.StateSent {
		e.PacketID = q.PacketID
	}
	o := &r.b.owned
	o.mu.Lock()
	o.found[clientID] = append(o.found[clientID], e)
	o.mu.Unlock()
	r.maxID = max(r.maxID, q.MessageID)
	r.queued++
	return nil
}
