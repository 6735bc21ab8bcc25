package cluster

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
)

// The peers' exact routes. Most filters name one topic (no wildcard, not shared), and a
// node keeps every peer's: in the remote index each costs its trie node and the filter's
// bytes. Here a peer's exact filters are a set of 64-bit hashes instead (maphash, seeded
// per process): a topic matches the peer when its hash is in the set. Two filters with
// one hash make a false positive at most, never a miss: the message crosses to a node
// that delivers it to no one (its own index decides, forward.go's Forward server), and
// the odds are one in 2^64 over the peer's count per message. Wildcard and shared
// filters stay in the remote index: matching needs their levels, a group its name.
//
// A peer's table is a set of distinct filters and its stream sends only changes
// (routes_stream.go), so an add is always a filter the set lacks: two filters of one
// hash are counted (dups), and the remove of one keeps the other.

// exactFilter reports whether filter matches exactly one topic, itself.
func exactFilter(f string) bool {
	return !strings.ContainsAny(f, "+#") && !strings.HasPrefix(f, "$share/")
}

// exactRoutes holds every peer's exact filters. Writers hold routes.rmu as well.
type exactRoutes struct {
	seed  maphash.Seed
	mu    sync.RWMutex // guards peers and their sets; Forward reads on every message
	peers []*exactPeer
}

// exactPeer is one peer's exact filters.
type exactPeer struct {
	id   pubsub.SubscriberID
	set  map[uint64]struct{}
	dups map[uint64]uint32 // hash → filters beyond the first with it; almost always empty
}

func newExactRoutes() *exactRoutes { return &exactRoutes{seed: maphash.MakeSeed()} }

func (e *exactRoutes) hash(b []byte) uint64 { return maphash.Bytes(e.seed, b) }

// peerLocked returns id's set, making it on first use. e.mu is held.
func (e *exactRoutes) peerLocked(id pubsub.SubscriberID) *exactPeer {
	for _, p := range e.peers {
		if p.id == id {
			return p
		}
	}
	p := &exactPeer{id: id, set: map[uint64]struct{}{}}
	e.peers = append(e.peers, p)
	return p
}

// reset empties id's set, for a snapshot of its table.
func (e *exactRoutes) reset(id pubsub.SubscriberID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peerLocked(id)
	p.set, p.dups = map[uint64]struct{}{}, nil
}

// add adds filter to id's set.
func (e *exactRoutes) add(id pubsub.SubscriberID, filter string) {
	h := maphash.String(e.seed, filter)
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peerLocked(id)
	if _, ok := p.set[h]; !ok {
		p.set[h] = struct{}{}
		return
	}
	if p.dups == nil {
		p.dups = map[uint64]uint32{}
	}
	p.dups[h]++
}

// remove takes filter out of id's set and reports whether its hash was there.
func (e *exactRoutes) remove(id pubsub.SubscriberID, filter string) bool {
	h := maphash.String(e.seed, filter)
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.peerLocked(id)
	if _, ok := p.set[h]; !ok {
		return false
	}
	switch n := p.dups[h]; n {
	case 0:
		delete(p.set, h)
	case 1:
		delete(p.dups, h)
	default:
		p.dups[h] = n - 1
	}
	return true
}

// drop forgets id's set: the peer is gone.
func (e *exactRoutes) drop(id pubsub.SubscriberID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, p := range e.peers {
		if p.id == id {
			e.peers[i] = e.peers[len(e.peers)-1]
			e.peers[len(e.peers)-1] = nil
			e.peers = e.peers[:len(e.peers)-1]
			return
		}
	}
}

// match appends the peers with an exact filter equal to topic to out.
func (e *exactRoutes) match(topic []byte, out []pubsub.SubscriberID) []pubsub.SubscriberID {
	h := e.hash(topic)
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, p := range e.peers {
		if _, ok := p.set[h]; ok {
			out = append(out, p.id)
		}
	}
	return out
}
