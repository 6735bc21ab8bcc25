package pubsub

import (
	"sync/atomic"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Group is a handle to one shared subscription group ("$share/{name}/{filter}", MQTT 5
// section 4.8.2) as Match reports it. It is a small value, valid until the group's last
// member leaves; after that Pick and GroupName treat it as unknown (generations are never
// reused, so a stale handle never reaches another group).
type Group struct {
	idx uint32 // into groups.list
	gen uint32
}

// group is one shared group. Its members live in the slab like a node's subscriptions.
type group struct {
	name   string // the whole filter, "$share/{name}/{filter}"
	node   uint32 // the filter's node
	next   uint32 // next group on the same node; the next free group on the free list
	gen    uint32
	cursor uint32 // round-robin position; Pick advances it atomically under the read lock
	off, n uint32 // members: the block in the slab
	class  uint8
}

const groupSize = int(unsafe.Sizeof(group{}))

// groups holds an index's shared groups. Groups are few next to subscriptions (one per
// share name and filter), so they keep their name as a string.
type groups struct {
	list  []group           // list[0] is unused: index 0 means none
	heads map[uint32]uint32 // node id → its first group, for nodes with flagGroups
	free  uint32            // free list of indexes, through group.next
	live  int
	gen   uint32 // the last generation handed out
}

func (gs *groups) block(g uint32) block {
	gr := &gs.list[g]
	return block{groupOwner | g, gr.node >> pageShift, &gr.off, &gr.n, &gr.class}
}

// find returns the group of node whose whole filter is filter, or 0.
func (gs *groups) find(t *tree, node uint32, filter []byte) uint32 {
	if t.node(node).flags&flagGroups == 0 {
		return 0
	}
	for g := gs.heads[node]; g != 0; g = gs.list[g].next {
		if gs.list[g].name == string(filter) {
			return g
		}
	}
	return 0
}

// add creates the group for filter on node.
func (gs *groups) add(t *tree, node uint32, filter []byte) uint32 {
	g := gs.free
	if g != 0 {
		gs.free = gs.list[g].next
	} else {
		if len(gs.list) == 0 {
			gs.list = append(gs.list, group{})
		}
		gs.list = append(gs.list, group{})
		g = uint32(len(gs.list) - 1)
	}
	if gs.heads == nil {
		gs.heads = make(map[uint32]uint32)
	}
	gs.gen++
	gs.list[g] = group{name: string(filter), node: node, next: gs.heads[node], gen: gs.gen}
	gs.heads[node] = g
	t.node(node).flags |= flagGroups
	gs.live++
	return g
}

// remove frees group g, whose last member has left.
func (gs *groups) remove(t *tree, g uint32) {
	node := gs.list[g].node
	if h := gs.heads[node]; h == g {
		if next := gs.list[g].next; next != 0 {
			gs.heads[node] = next
		} else {
			delete(gs.heads, node)
			t.node(node).flags &^= flagGroups
		}
	} else {
		for h != 0 && gs.list[h].next != g {
			h = gs.list[h].next
		}
		gs.list[h].next = gs.list[g].next
	}
	gs.list[g] = group{next: gs.free}
	gs.free = g
	gs.live--
}

// reset drops every group; generations go on from where they were.
func (gs *groups) reset() {
	*gs = groups{gen: gs.gen}
}

// get returns the live group that g names, or nil.
func (gs *groups) get(g Group) *group {
	if g.idx == 0 || int(g.idx) >= len(gs.list) {
		return nil
	}
	gr := &gs.list[g.idx]
	if gr.gen != g.gen || gr.n == 0 {
		return nil
	}
	return gr
}

// Pick chooses the member of group g that receives a message, and reports whether one
// would take it.
//
// The strategy is round-robin: each call starts one past where the previous one started,
// by an atomic increment of the group's cursor, and offers the message to members in order
// until accept (offline? no room in its queue?) returns true. When it had to skip members
// it moves the cursor past the one chosen, so that the member after a skipped one is not
// chosen twice running. Members leaving change the order (the last member takes the
// leaver's place), which costs a little fairness for a moment, never a lost message.
//
// accept runs under the index's read lock: it must not call Subscribe or Unsubscribe.
func (x *Index) Pick(g Group, accept func(Sub) bool) (Sub, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	gr := x.groups.get(g)
	if gr == nil {
		return Sub{}, false
	}
	members := x.slab.get(x.groups.block(g.idx))
	n := uint32(len(members))
	start := atomic.AddUint32(&gr.cursor, 1) - 1
	for i := range n {
		if s := members[(start+i)%n]; accept(s) {
			if i > 0 {
				atomic.AddUint32(&gr.cursor, i)
			}
			return s, true
		}
	}
	return Sub{}, false
}

// GroupName returns the filter of group g as subscribed, "$share/{name}/{filter}", for logs
// and for redelivering a leaving member's messages to the group; "" once the group is gone.
func (x *Index) GroupName(g Group) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if gr := x.groups.get(g); gr != nil {
		return gr.name
	}
	return ""
}

// GroupOf returns the handle of the group of a "$share/{name}/{filter}" filter, if it has
// members.
func (x *Index) GroupOf(filter []byte) (Group, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, f, shared := packet.SplitShared(filter)
	if !shared {
		return Group{}, false
	}
	node := x.tree.lookup(f)
	if node == 0 {
		return Group{}, false
	}
	g := x.groups.find(&x.tree, node, filter)
	if g == 0 {
		return Group{}, false
	}
	return Group{g, x.groups.list[g].gen}, true
}
