package pubsub

import "unsafe"

// Page geometry: a page holds 4,096 nodes (128 KiB) with their labels.
const (
	pageShift = 12
	pageLen   = 1 << pageShift
	pageMask  = pageLen - 1
)

// Thresholds of the tree's upkeep.
var (
	// minFreeNodes: below this many free nodes, upkeep leaves them all for reuse.
	minFreeNodes = 256
	// minDeadBytes: below this many dead label bytes, a page keeps them.
	minDeadBytes = 256
)

// shrinkSteps is how many nodes one write operation may move while the tree shrinks.
const shrinkSteps = 8

// A nodePage holds the nodes with ids page<<pageShift to page<<pageShift+pageMask, and the
// labels of those nodes. Everything a node owns lives in the page of its id (the Index
// keeps its subscription blocks the same way), so that upkeep is local: a page whose
// labels are half dead is rewritten alone, in O(page), and truncating the id space frees
// whole pages. No operation on the tree takes time in proportion to its size.
//
// One slice of nodes grown by append would copy itself again and again (five times its
// final size at Go's 1.25x growth), each copy a multi-millisecond memmove that the GC
// cannot preempt; pages are allocated once. The first page starts small and doubles, so
// that a small index stays small.
type nodePage struct {
	nodes  []node
	labels []byte // the labels of these nodes, and dead bytes
	dead   int    // bytes of labels no node uses
	queued bool   // in tree.dirty
}

func (t *tree) node(x uint32) *node { return &t.pages[x>>pageShift].nodes[x&pageMask] }

func (t *tree) label(x uint32) []byte {
	pg := &t.pages[x>>pageShift]
	n := &pg.nodes[x&pageMask]
	return pg.labels[n.off : n.off+uint32(n.llen)]
}

// alloc returns a zeroed node, from the free list if it can. It may move the first page of
// nodes: callers must not hold node pointers across it.
func (t *tree) alloc() uint32 {
	if id := t.free; id != 0 {
		t.unfree(id)
		*t.node(id) = node{}
		return id
	}
	id := t.n
	p, i := id>>pageShift, int(id&pageMask)
	if int(p) == len(t.pages) {
		c := pageLen
		if p == 0 {
			c = 8
		}
		t.pages = append(t.pages, nodePage{nodes: make([]node, 0, c)})
	}
	pg := &t.pages[p]
	if i == len(pg.nodes) {
		if i == cap(pg.nodes) { // the first page, still growing
			grown := make([]node, i, min(pageLen, 2*i))
			copy(grown, pg.nodes)
			pg.nodes = grown
		}
		pg.nodes = pg.nodes[:i+1]
	}
	t.n++
	return id
}

// release puts node x, already unlinked, on the free list.
func (t *tree) release(x uint32) {
	t.dropLabel(x)
	n := t.node(x)
	*n = node{flags: flagFree, next: t.free}
	if t.free != 0 {
		t.node(t.free).prev = x
	}
	t.free = x
	t.nfree++
}

// unfree takes node x off the free list.
func (t *tree) unfree(x uint32) {
	n := t.node(x)
	if n.prev != 0 {
		t.node(n.prev).next = n.next
	} else {
		t.free = n.next
	}
	if n.next != 0 {
		t.node(n.next).prev = n.prev
	}
	t.nfree--
}

// setLabel gives node x, which has none, the label b. b may lie in a page's labels.
func (t *tree) setLabel(x uint32, b []byte) {
	pg := &t.pages[x>>pageShift]
	n := &pg.nodes[x&pageMask]
	n.off, n.llen = uint32(len(pg.labels)), uint16(len(b))
	pg.labels = append(pg.labels, b...)
	t.live += len(b)
}

// cutLabel removes the first k bytes of x's label.
func (t *tree) cutLabel(x uint32, k int) {
	n := t.node(x)
	n.off += uint32(k)
	n.llen -= uint16(k)
	t.bury(x>>pageShift, k)
}

// joinLabel sets x's label to prefix/label.
func (t *tree) joinLabel(x uint32, prefix []byte) {
	pg := &t.pages[x>>pageShift]
	n := &pg.nodes[x&pageMask]
	old := pg.labels[n.off : n.off+uint32(n.llen)]
	off := len(pg.labels)
	pg.labels = append(pg.labels, prefix...) // old and prefix stay valid if this moves labels
	pg.labels = append(pg.labels, '/')
	pg.labels = append(pg.labels, old...)
	n.off, n.llen = uint32(off), uint16(len(prefix)+1+len(old))
	t.live += len(prefix) + 1 + len(old)
	t.bury(x>>pageShift, len(old))
}

// dropLabel forgets x's label.
func (t *tree) dropLabel(x uint32) {
	n := t.node(x)
	k := int(n.llen)
	n.off, n.llen = 0, 0
	t.bury(x>>pageShift, k)
}

// bury counts k label bytes of page p dead, and queues the page for compactLabels when
// they outweigh the live ones.
func (t *tree) bury(p uint32, k int) {
	pg := &t.pages[p]
	pg.dead += k
	t.live -= k
	if pg.dead >= minDeadBytes && pg.dead*2 > len(pg.labels) && !pg.queued {
		pg.queued = true
		t.dirty = append(t.dirty, p)
	}
}

// compactLabels rewrites the labels of page p without dead bytes.
func (t *tree) compactLabels(p uint32) {
	pg := &t.pages[p]
	labels := make([]byte, 0, len(pg.labels)-pg.dead)
	for i := range pg.nodes {
		n := &pg.nodes[i]
		if n.llen == 0 {
			n.off = 0 // an empty level, the root, a free node or one past the end
			continue
		}
		lab := pg.labels[n.off : n.off+uint32(n.llen)]
		n.off = uint32(len(labels))
		labels = append(labels, lab...)
	}
	pg.labels, pg.dead = labels, 0
}

// upkeep does the tree's bounded housekeeping at the end of a write operation: it rewrites
// the labels of queued pages and, while free nodes outnumber half the live ones, moves up
// to shrinkSteps nodes from the end of the id space into free slots, giving back each page
// it empties. Moving a node costs O(1) plus O(its children): a node with a million
// children moved would take as long as inserting them.
func (t *tree) upkeep() {
	for steps := shrinkSteps; steps > 0 && t.nfree >= minFreeNodes && t.nfree*2 > t.liveNodes(); steps-- {
		last := t.n - 1
		if t.node(last).flags&flagFree != 0 {
			t.unfree(last)
		} else {
			to := t.free
			t.unfree(to)
			t.move(last, to)
		}
		t.truncate()
	}
	for _, p := range t.dirty {
		if int(p) < len(t.pages) && t.pages[p].queued {
			t.pages[p].queued = false
			t.compactLabels(p)
		}
	}
	t.dirty = t.dirty[:0]
}

// move gives the live node at from the id to, a free slot taken off the free list.
func (t *tree) move(from, to uint32) {
	lab := t.label(from)
	*t.node(to) = *t.node(from)
	t.node(to).llen = 0
	t.setLabel(to, lab)
	t.dropLabel(from)
	n := t.node(to)
	if n.prev != 0 {
		t.node(n.prev).next = to
	} else {
		t.node(n.parent).child = to
	}
	if n.next != 0 {
		t.node(n.next).prev = to
	}
	t.tab.replace(t.hash(n.parent, firstLevel(lab)), from, to)
	for c := n.child; c != 0; c = t.node(c).next {
		level := firstLevel(t.label(c))
		t.tab.remove(t.hash(from, level), c)
		t.node(c).parent = to
		t.tab.insert(t.hash(to, level), c)
	}
	if t.moved != nil {
		t.moved(from, to)
	}
}

// truncate drops the last node id, which is neither live nor free, and its page if empty.
func (t *tree) truncate() {
	t.n--
	p := t.n >> pageShift
	pg := &t.pages[p]
	pg.nodes[t.n&pageMask] = node{}
	if t.n&pageMask == 0 && p > 0 { // every label of the page is dead
		t.pages[p] = nodePage{}
		t.pages = t.pages[:p]
	}
}

// stats describes the tree's storage, for tests.
func (t *tree) stats() stats {
	st := stats{nodes: t.liveNodes(), freeNodes: t.nfree, pages: len(t.pages), slots: t.tab.slots()}
	st.bytes = cap(t.pages)*int(unsafe.Sizeof(nodePage{})) + st.slots*8 + cap(t.tab.dir)*4 +
		cap(t.tab.segs)*int(unsafe.Sizeof(segment{})) + cap(t.dirty)*4
	for i := range t.pages {
		pg := &t.pages[i]
		st.labels += len(pg.labels)
		st.deadLabels += pg.dead
		st.bytes += cap(pg.nodes)*int(unsafe.Sizeof(node{})) + cap(pg.labels)
	}
	return st
}
