package pubsub

import (
	"sync"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// An Index stores subscriptions by topic filter and finds those matching a topic. It is
// safe for concurrent use: Match, Pick, GroupName, Walk and Len share a read lock;
// Subscribe and Unsubscribe take it exclusively.
type Index struct {
	mu     sync.RWMutex
	tree   tree
	slab   slab
	groups groups
	count  int // subscriptions, shared included
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	x := &Index{tree: newTree()}
	x.tree.moved = x.nodeMoved
	return x
}

func (x *Index) nodeBlock(id uint32) block {
	n := x.tree.node(id)
	return block{id, id >> pageShift, &n.val, &n.n, &n.class}
}

// Subscribe adds s under filter, or replaces the options of the same subscriber's
// subscription to the same filter, reporting the latter [MQTT-3.8.4-3]. A
// "$share/{group}/{filter}" filter joins shared group {group} for {filter}; that is a
// subscription distinct from one to {filter} alone or in another group. The filter must be
// valid (packet.ValidTopicFilter); it is copied.
//
// Adding a subscriber to a filter that already has subscribers allocates only when its
// block of the slab must grow.
func (x *Index) Subscribe(filter []byte, s Sub) (existed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := filter
	_, sf, shared := packet.SplitShared(filter)
	if shared {
		f = sf
	}
	id := x.tree.insert(f)
	if shared {
		g := x.groups.find(&x.tree, id, filter)
		if g == 0 {
			g = x.groups.add(&x.tree, id, filter)
		}
		existed = x.slab.put(x.groups.block(g), s)
	} else {
		existed = x.slab.put(x.nodeBlock(id), s)
	}
	if !existed {
		x.count++
	}
	x.upkeep()
	return existed
}

// Unsubscribe removes subscriber id's subscription to filter (shared or not), and reports
// whether there was one. It allocates nothing, except while the index gives memory back
// after a mass removal (a few bounded steps per call).
func (x *Index) Unsubscribe(filter []byte, id SubscriberID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := filter
	_, sf, shared := packet.SplitShared(filter)
	if shared {
		f = sf
	}
	n := x.tree.lookup(f)
	if n == 0 {
		return false
	}
	if shared {
		g := x.groups.find(&x.tree, n, filter)
		if g == 0 || !x.slab.remove(x.groups.block(g), id) {
			return false
		}
		if x.groups.list[g].n == 0 {
			x.groups.remove(&x.tree, g)
		}
	} else if !x.slab.remove(x.nodeBlock(n), id) {
		return false
	}
	x.count--
	x.tree.tidy(n)
	x.upkeep()
	return true
}

// Subscribed reports whether filter ("$share/{group}/{filter}" for a shared group) has a
// subscriber. A node of a cluster asks it around each change, under a lock of its own, to
// route a filter while it has local subscribers (broker/cluster_routes.go).
func (x *Index) Subscribed(filter []byte) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	f := filter
	_, sf, shared := packet.SplitShared(filter)
	if shared {
		f = sf
	}
	n := x.tree.lookup(f)
	switch {
	case n == 0:
		return false
	case shared:
		return x.groups.find(&x.tree, n, filter) != 0 // a group without members is removed
	default:
		return x.tree.node(n).n > 0
	}
}

// upkeep does the index's bounded housekeeping at the end of a write operation (see
// tree.upkeep): it gives everything back when the index is empty, and compacts the slab
// pages that removals left mostly free.
func (x *Index) upkeep() {
	if x.count == 0 {
		if x.tree.n > 1 || x.slab.pages != nil {
			x.tree.reset()
			x.slab = slab{}
			x.groups.reset()
		}
		return
	}
	x.tree.upkeep()
	for len(x.slab.pages) > len(x.tree.pages) { // emptied by the tree's shrinking
		x.slab.pages = x.slab.pages[:len(x.slab.pages)-1]
	}
	for _, p := range x.slab.dirty {
		if int(p) < len(x.slab.pages) && x.slab.pages[p].queued {
			x.slab.compact(p, func(yield func(block)) { x.pageBlocks(p, yield) })
		}
	}
	x.slab.dirty = x.slab.dirty[:0]
}

// pageBlocks calls fn for the block of every node of node page p, and of their groups.
func (x *Index) pageBlocks(p uint32, fn func(b block)) {
	end := min(x.tree.n, (p+1)<<pageShift)
	for id := p << pageShift; id < end; id++ {
		n := x.tree.node(id)
		if n.n != 0 {
			fn(x.nodeBlock(id))
		}
		if n.flags&flagGroups != 0 {
			for g := x.groups.heads[id]; g != 0; g = x.groups.list[g].next {
				fn(x.groups.block(g))
			}
		}
	}
}

// nodeMoved follows the tree moving a node from one id to another: the blocks of the node
// and of its groups go to the slab page of the new id, and groups point to it.
func (x *Index) nodeMoved(from, to uint32) {
	n := x.tree.node(to)
	x.slab.rehome(block{from, from >> pageShift, &n.val, &n.n, &n.class}, to, to>>pageShift)
	if n.flags&flagGroups == 0 {
		return
	}
	g := x.groups.heads[from]
	delete(x.groups.heads, from)
	x.groups.heads[to] = g
	for ; g != 0; g = x.groups.list[g].next {
		x.groups.list[g].node = to
		b := x.groups.block(g)
		b.page = from >> pageShift
		x.slab.rehome(b, b.owner, to>>pageShift)
	}
}

// Len returns the number of subscriptions, shared included.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.count
}

// Walk calls fn for every subscription, with its filter as given to Subscribe, until fn
// returns false. filter is valid only during the call. fn runs under the read lock: it
// must not call Subscribe or Unsubscribe.
func (x *Index) Walk(fn func(filter []byte, s Sub) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var path []byte
	t := &x.tree
	t.walk(0, func(id uint32) bool {
		path = x.path(path[:0], id)
		for _, s := range x.slab.get(x.nodeBlock(id)) {
			if !fn(path, s) {
				return false
			}
		}
		if t.node(id).flags&flagGroups == 0 {
			return true
		}
		for g := x.groups.heads[id]; g != 0; g = x.groups.list[g].next {
			path = append(path[:0], x.groups.list[g].name...)
			for _, s := range x.slab.get(x.groups.block(g)) {
				if !fn(path, s) {
					return false
				}
			}
		}
		return true
	})
}

// path appends the path of node id to b.
func (x *Index) path(b []byte, id uint32) []byte {
	if id == 0 {
		return b
	}
	if p := x.tree.node(id).parent; p != 0 {
		b = append(x.path(b, p), '/')
	}
	return append(b, x.tree.label(id)...)
}

// stats describes an index's storage for tests.
type stats struct {
	nodes, freeNodes, pages, slots, labels, deadLabels, subs, freeSubs, groups, indexed int
	bytes                                                                               int // held, by capacity
}

func (x *Index) stats() stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	st := x.tree.stats()
	for i := range x.slab.pages {
		st.subs += len(x.slab.pages[i].subs)
		st.freeSubs += int(x.slab.pages[i].nfree)
	}
	st.groups, st.indexed = x.groups.live, len(x.slab.pos)
	st.bytes += x.slab.capacity()*int(unsafe.Sizeof(Sub{})) + cap(x.slab.pages)*int(unsafe.Sizeof(subPage{})) +
		cap(x.groups.list)*groupSize + len(x.groups.heads)*8 + len(x.slab.pos)*12
	return st
}
