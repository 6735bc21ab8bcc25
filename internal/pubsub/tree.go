package pubsub

import (
	"bytes"
	"hash/maphash"
)

// node is one vertex of the tree: 32 bytes, no pointers. Fields are ordered so that the
// three small ones share the last word.
type node struct {
	parent uint32 // 0 for the root and for children of the root
	off    uint32 // label: the node page's labels[off : off+llen]
	child  uint32 // first child, 0 = none
	next   uint32 // next sibling, 0 = none; on the free list, the next free node
	prev   uint32 // previous sibling, 0 = none; on the free list, the previous free node
	val    uint32 // payload, the owner's: slab offset (Index) or entry index (Retained)
	n      uint32 // payload count: Subs in the block (Index) or 1 (Retained); 0 = none
	llen   uint16 // label length: a label is part of an MQTT string, at most 65,535 bytes
	flags  uint8
	class  uint8 // the owner's: log2 of the slab block's capacity (Index)
}

// Node flags.
const (
	flagPlus   uint8 = 1 << iota // has a '+' child
	flagPound                    // has a '#' child
	flagWild                     // is a '+' or '#' level, never merged with another
	flagGroups                   // Index: shared groups hang off this node
	flagFree                     // on the free list
)

var (
	plusLevel  = []byte{'+'}
	poundLevel = []byte{'#'}
)

// tree is the trie of topic levels with path compression shared by Index and Retained (see
// the package doc for its invariants). It is not safe for concurrent use; its owner locks.
// Nodes live in pages (nodes.go); a node keeps its id until shrink moves it.
type tree struct {
	pages []nodePage
	n     uint32 // node ids in use, free ones included
	free  uint32 // first node of the free list, 0 = none
	nfree int    // nodes on the free list
	live  int    // label bytes of live nodes
	dirty []uint32
	tab   table
	seed  maphash.Seed
	// moved, if set, is called when shrink has moved a node from one id to another, for
	// the owner to follow: the node's payload is still the one it had at from.
	moved func(from, to uint32)
}

func newTree() tree {
	t := tree{seed: maphash.MakeSeed()}
	t.alloc() // the root
	return t
}

// reset empties the tree and releases its memory.
func (t *tree) reset() {
	*t = tree{seed: t.seed, moved: t.moved}
	t.alloc()
}

// liveNodes counts the nodes in the tree, the root included.
func (t *tree) liveNodes() int { return int(t.n) - t.nfree }

// hash is the table key of a child: its parent and the first level of its label. The seed
// is random per tree, so clients cannot choose topics that collide.
func (t *tree) hash(parent uint32, level []byte) uint32 {
	h := maphash.Bytes(t.seed, level) + uint64(parent)*0x9e3779b97f4a7c15
	h ^= h >> 31 // splitmix64's finalizer spreads the parent over every bit
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return uint32(h)
}

// levelEnd returns the end of the level of b starting at i: the index of the next '/', or
// len(b).
func levelEnd(b []byte, i int) int {
	if j := bytes.IndexByte(b[i:], '/'); j >= 0 {
		return i + j
	}
	return len(b)
}

// firstLevel returns the first level of a label.
func firstLevel(label []byte) []byte { return label[:levelEnd(label, 0)] }

// hasLevelPrefix reports whether s starts with the levels of label, ending at a level
// boundary.
func hasLevelPrefix(s, label []byte) bool {
	return len(s) >= len(label) && bytes.Equal(s[:len(label)], label) &&
		(len(s) == len(label) || s[len(label)] == '/')
}

func isPlus(level []byte) bool  { return len(level) == 1 && level[0] == '+' }
func isPound(level []byte) bool { return len(level) == 1 && level[0] == '#' }

// find returns the child of parent whose label starts with level, or 0.
func (t *tree) find(parent uint32, level []byte) uint32 {
	if t.tab.n == 0 {
		return 0
	}
	h := t.hash(parent, level)
	seg := t.tab.seg(h)
	mask := len(seg.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := seg.slots[i]
		if s == 0 {
			return 0
		}
		if uint32(s>>32) != h {
			continue
		}
		id := uint32(s)
		pg := &t.pages[id>>pageShift]
		n := &pg.nodes[id&pageMask]
		if n.parent != parent || int(n.llen) < len(level) {
			continue
		}
		lab := pg.labels[n.off : n.off+uint32(n.llen)]
		if bytes.Equal(lab[:len(level)], level) && (len(lab) == len(level) || lab[len(level)] == '/') {
			return id
		}
	}
}

// add creates a child of parent labelled label and links it in.
func (t *tree) add(parent uint32, label []byte, flags uint8) uint32 {
	c := t.alloc()
	t.setLabel(c, label)
	t.node(c).flags = flags
	t.link(parent, c)
	return c
}

// link makes c the first child of parent and enters it in the table.
func (t *tree) link(parent, c uint32) {
	n, p := t.node(c), t.node(parent)
	n.parent, n.prev, n.next = parent, 0, p.child
	if n.next != 0 {
		t.node(n.next).prev = c
	}
	p.child = c
	t.tab.insert(t.hash(parent, firstLevel(t.label(c))), c)
}

// takePlace puts node y where x is in x's parent's list of children.
func (t *tree) takePlace(x, y uint32) {
	xn, yn := t.node(x), t.node(y)
	yn.parent, yn.prev, yn.next = xn.parent, xn.prev, xn.next
	if yn.prev != 0 {
		t.node(yn.prev).next = y
	} else {
		t.node(yn.parent).child = y
	}
	if yn.next != 0 {
		t.node(yn.next).prev = y
	}
}

// insert returns the node for path (a topic filter without its $share prefix, or a topic
// name), creating nodes and splitting labels as needed. The caller gives the node a payload.
func (t *tree) insert(path []byte) uint32 {
	x, pos, end := uint32(0), 0, len(path)
	for pos <= end {
		e := levelEnd(path, pos)
		level := path[pos:e]
		if isPlus(level) || isPound(level) {
			flag := flagPlus
			if isPound(level) {
				flag = flagPound
			}
			if t.node(x).flags&flag != 0 {
				x = t.find(x, level)
			} else {
				t.node(x).flags |= flag
				x = t.add(x, level, flagWild)
			}
			pos = e + 1
			continue
		}
		c := t.find(x, level)
		if c == 0 {
			// A new node takes every literal level up to the next wildcard or the end.
			for e < end {
				ne := levelEnd(path, e+1)
				if isPlus(path[e+1:ne]) || isPound(path[e+1:ne]) || ne-pos > 0xffff {
					break
				}
				e = ne
			}
			if e-pos > 0xffff {
				panic("pubsub: topic level longer than 65535 bytes")
			}
			x = t.add(x, path[pos:e], 0)
			pos = e + 1
			continue
		}
		// c's first level is level: walk the rest of its label along path.
		lab := t.label(c)
		li, p := 0, pos
		for {
			le, pe := levelEnd(lab, li), levelEnd(path, p)
			if !bytes.Equal(lab[li:le], path[p:pe]) {
				c, pos = t.split(c, li-1), p // path leaves the label here (li > 0)
				break
			}
			if le == len(lab) {
				pos = pe + 1
				break
			}
			if pe == end {
				c, pos = t.split(c, le), end+1 // path ends inside the label
				break
			}
			li, p = le+1, pe+1
		}
		x = c
	}
	return x
}

// split cuts c's label at the '/' at byte s: a new node takes the levels before it, and c,
// keeping the levels after it, becomes its only child. It returns the new node.
func (t *tree) split(c uint32, s int) uint32 {
	m := t.alloc()
	lab := t.label(c)
	t.setLabel(m, lab[:s])
	h := t.hash(t.node(c).parent, firstLevel(lab))
	t.takePlace(c, m)
	t.tab.replace(h, c, m)
	t.cutLabel(c, s+1)
	t.node(m).child = c
	cn := t.node(c)
	cn.parent, cn.prev, cn.next = m, 0, 0
	t.tab.insert(t.hash(m, firstLevel(t.label(c))), c)
	return m
}

// lookup returns the node whose path is exactly path, or 0.
func (t *tree) lookup(path []byte) uint32 {
	x, pos := uint32(0), 0
	for pos <= len(path) {
		c := t.find(x, path[pos:levelEnd(path, pos)])
		if c == 0 {
			return 0
		}
		lab := t.label(c)
		if !hasLevelPrefix(path[pos:], lab) {
			return 0
		}
		x, pos = c, pos+len(lab)+1
	}
	return x
}

// tidy restores the invariants after x lost its payload: it removes x and every ancestor
// left without payload or children, then merges the first one left with a single literal
// child into that child.
func (t *tree) tidy(x uint32) {
	for x != 0 {
		n := t.node(x)
		if n.n != 0 || n.flags&flagGroups != 0 {
			return
		}
		if n.child != 0 {
			if c := t.node(n.child); n.flags&flagWild == 0 && c.next == 0 && c.flags&flagWild == 0 {
				t.merge(x, n.child)
			}
			return
		}
		p := n.parent
		t.remove(x)
		x = p
	}
}

// remove unlinks x, which has no children, and frees it.
func (t *tree) remove(x uint32) {
	n := t.node(x)
	lab := t.label(x)
	t.tab.remove(t.hash(n.parent, firstLevel(lab)), x)
	if n.prev != 0 {
		t.node(n.prev).next = n.next
	} else {
		t.node(n.parent).child = n.next
	}
	if n.next != 0 {
		t.node(n.next).prev = n.prev
	}
	if n.flags&flagWild != 0 {
		if isPlus(lab) {
			t.node(n.parent).flags &^= flagPlus
		} else {
			t.node(n.parent).flags &^= flagPound
		}
	}
	t.release(x)
}

// merge folds x, a literal node without payload, into c, its only child and literal too:
// c takes x's place with the label x/c.
func (t *tree) merge(x, c uint32) {
	xn, cn := t.node(x), t.node(c)
	if int(xn.llen)+1+int(cn.llen) > 0xffff {
		return // too long for one label: keep both (only for paths past MQTT's limit)
	}
	xl, cl := t.label(x), t.label(c)
	hx, hc := t.hash(xn.parent, firstLevel(xl)), t.hash(x, firstLevel(cl))
	t.tab.remove(hc, c)
	t.tab.replace(hx, x, c)
	t.joinLabel(c, xl)
	t.takePlace(x, c)
	t.node(x).child = 0
	t.release(x)
}

// walk calls fn for each node below x in depth-first order, x first, until fn returns
// false; it reports whether it ran to the end. fn must not change the tree.
func (t *tree) walk(x uint32, fn func(x uint32) bool) bool {
	top := x
	for {
		if !fn(x) {
			return false
		}
		if c := t.node(x).child; c != 0 {
			x = c
			continue
		}
		for x != top && t.node(x).next == 0 {
			x = t.node(x).parent
		}
		if x == top {
			return true
		}
		x = t.node(x).next
	}
}
