package pubsub

// slab holds the subscription lists of an Index: each owner (a node's plain subscriptions,
// or a shared group's members) has one block of 2^class Subs, its live Subs first. Match
// copies a node's list with a single append, and the GC never looks inside: Sub has no
// pointers.
//
// Blocks live in the slab page of their node's page (see nodePage), so that a page of
// blocks is compacted alone and moves with its nodes; a block of more than a page's worth
// of Subs (a topic thousands subscribe to) is an allocation of its own in big. A block
// doubles when full and halves when a quarter full; a paged block halves in place, its
// upper half going to the free list of its class, so that removal allocates nothing below a
// page's worth of subscribers. Free blocks are linked through their first Sub, and a page
// more than half free is rewritten alone (compact).
//
// Within a block a subscriber is found by a linear scan, which beats hashing up to a few
// dozen entries; from indexedClass up the position of each subscriber is kept in pos, a
// pointer-free map the GC does not scan.
type slab struct {
	pages   []subPage // by node page
	big     [][]Sub   // blocks over pageLen Subs, by offset &^ bigBlock
	bigFree []uint32  // unused indexes of big
	pos     map[uint64]uint32
	dirty   []uint32 // pages queued for compaction
}

// A subPage holds the blocks of the owners whose node is in one node page.
type subPage struct {
	subs   []Sub
	free   [pageShift + 1]uint32 // per class, the offset+1 of the first free block
	nfree  uint32                // Subs in free blocks
	queued bool                  // in slab.dirty
}

const (
	// indexedClass is the smallest class whose blocks are indexed in slab.pos.
	indexedClass = 5 // 32 Subs
	// bigBlock marks the offset of a block in slab.big.
	bigBlock = 1 << 31
	// groupOwner marks a group's index as the owner of a block.
	groupOwner = 1 << 30
)

// minFreeSubs: below this many free Subs, a page keeps them for reuse.
var minFreeSubs uint32 = 64

// block points at the fields of a node or group that describe its block. It is valid until
// the owner's storage moves: use it at once.
type block struct {
	owner  uint32 // node id, or groupOwner | group index
	page   uint32 // the slab page: the node page of the owner's node
	off, n *uint32
	class  *uint8
}

// key returns the pos key of subscriber id in b: a paged block is known by its owner, a
// big one by its place in big, which does not change when its node moves.
func (b block) key(id SubscriberID) uint64 {
	o := b.owner
	if *b.off&bigBlock != 0 {
		o = *b.off
	}
	return uint64(o)<<32 | uint64(id)
}

// get returns the Subs of b.
func (s *slab) get(b block) []Sub { return s.at(b.page, *b.off, *b.n) }

// at returns the first n Subs of the block at off in page p.
func (s *slab) at(p, off, n uint32) []Sub {
	if n == 0 {
		return nil // an empty block may have no page (the empty index's root)
	}
	if off&bigBlock != 0 {
		return s.big[off&^bigBlock][:n]
	}
	return s.pages[p].subs[off : off+n]
}

// find returns the position of subscriber id in b, or -1.
func (s *slab) find(b block, id SubscriberID) int {
	if *b.n == 0 {
		return -1
	}
	if *b.class >= indexedClass {
		if p, ok := s.pos[b.key(id)]; ok {
			return int(p)
		}
		return -1
	}
	for i, v := range s.get(b) {
		if v.Subscriber == id {
			return i
		}
	}
	return -1
}

// put adds v to b, or replaces the Sub of the same subscriber, and reports the latter.
func (s *slab) put(b block, v Sub) (existed bool) {
	if i := s.find(b, v.Subscriber); i >= 0 {
		s.get(b)[i] = v
		return true
	}
	switch n := *b.n; {
	case n == 0:
		*b.off, *b.class = s.alloc(b.page, 0), 0
	case n == 1<<*b.class:
		s.relocate(b, b.owner, b.page, *b.class+1)
	}
	*b.n++
	s.get(b)[*b.n-1] = v
	if *b.class >= indexedClass {
		s.pos[b.key(v.Subscriber)] = *b.n - 1
	}
	return false
}

// remove deletes subscriber id from b, moving the last Sub into its place, and reports
// whether it was there.
func (s *slab) remove(b block, id SubscriberID) bool {
	i := s.find(b, id)
	if i < 0 {
		return false
	}
	subs := s.get(b)
	last := *b.n - 1
	indexed := *b.class >= indexedClass
	if uint32(i) != last {
		subs[i] = subs[last]
		if indexed {
			s.pos[b.key(subs[i].Subscriber)] = uint32(i)
		}
	}
	if indexed {
		delete(s.pos, b.key(id))
	}
	*b.n = last
	switch c := *b.class; {
	case last == 0:
		s.release(b.page, *b.off, c)
		*b.off, *b.class = 0, 0
	case c > 0 && last <= 1<<c/4:
		if *b.off&bigBlock != 0 {
			s.relocate(b, b.owner, b.page, c-1)
			break
		}
		// Halve in place: the upper half becomes a free block.
		s.release(b.page, *b.off+1<<(c-1), c-1)
		*b.class = c - 1
		if c == indexedClass {
			s.unindex(b)
		}
	}
	return true
}

// relocate copies b's Subs to a new block of class in page, for owner, and frees the old
// one, keeping pos up to date.
func (s *slab) relocate(b block, owner, page uint32, class uint8) {
	if *b.class >= indexedClass {
		s.unindex(b)
	}
	old := s.get(b)
	off := s.alloc(page, class) // old stays valid should this grow the page
	copy(s.at(page, off, *b.n), old)
	s.release(b.page, *b.off, *b.class)
	*b.off, *b.class = off, class
	if class >= indexedClass {
		s.index(block{owner, page, b.off, b.n, b.class})
	}
}

// rehome moves b to page, for owner, when its node has moved there. A big block stays put.
func (s *slab) rehome(b block, owner, page uint32) {
	if *b.n == 0 || *b.off&bigBlock != 0 {
		return
	}
	if page != b.page {
		s.relocate(b, owner, page, *b.class)
		return
	}
	if *b.class >= indexedClass && owner != b.owner {
		s.unindex(b)
		b.owner = owner
		s.index(b)
	}
}

func (s *slab) index(b block) {
	if s.pos == nil {
		s.pos = make(map[uint64]uint32)
	}
	for i, v := range s.get(b) {
		s.pos[b.key(v.Subscriber)] = uint32(i)
	}
}

func (s *slab) unindex(b block) {
	for _, v := range s.get(b) {
		delete(s.pos, b.key(v.Subscriber))
	}
}

// alloc returns the offset of a block of 2^class Subs in page p.
func (s *slab) alloc(p uint32, class uint8) uint32 {
	if class > pageShift {
		b := make([]Sub, 1<<class)
		if k := len(s.bigFree); k > 0 {
			i := s.bigFree[k-1]
			s.bigFree = s.bigFree[:k-1]
			s.big[i] = b
			return bigBlock | i
		}
		s.big = append(s.big, b)
		return bigBlock | uint32(len(s.big)-1)
	}
	for int(p) >= len(s.pages) {
		s.pages = append(s.pages, subPage{})
	}
	sp := &s.pages[p]
	if f := sp.free[class]; f != 0 {
		off := f - 1
		sp.free[class] = uint32(sp.subs[off].Subscriber)
		sp.nfree -= 1 << class
		return off
	}
	off := uint32(len(sp.subs))
	sp.subs = append(sp.subs, make([]Sub, 1<<class)...)
	return off
}

// release frees the block at off in page p, and queues the page for compaction when its
// free blocks outweigh the live ones.
func (s *slab) release(p, off uint32, class uint8) {
	if off&bigBlock != 0 {
		s.big[off&^bigBlock] = nil
		s.bigFree = append(s.bigFree, off&^bigBlock)
		return
	}
	sp := &s.pages[p]
	sp.subs[off] = Sub{Subscriber: SubscriberID(sp.free[class])}
	sp.free[class] = off + 1
	sp.nfree += 1 << class
	if sp.nfree >= minFreeSubs && sp.nfree*2 > uint32(len(sp.subs)) && !sp.queued {
		sp.queued = true
		s.dirty = append(s.dirty, p)
	}
}

// compact rewrites page p without free blocks; visit yields the blocks of the page's
// owners. Positions within blocks, and so pos, stay valid.
func (s *slab) compact(p uint32, visit func(yield func(b block))) {
	sp := &s.pages[p]
	subs := make([]Sub, 0, uint32(len(sp.subs))-sp.nfree)
	visit(func(b block) {
		if *b.n == 0 || *b.off&bigBlock != 0 {
			return
		}
		off := uint32(len(subs))
		subs = append(subs, sp.subs[*b.off:*b.off+*b.n]...)
		subs = append(subs, make([]Sub, 1<<*b.class-*b.n)...)
		*b.off = off
	})
	*sp = subPage{subs: subs}
}

// capacity returns the Subs the slab holds, for memory accounting.
func (s *slab) capacity() int {
	c := 0
	for i := range s.pages {
		c += cap(s.pages[i].subs)
	}
	for _, b := range s.big {
		c += cap(b)
	}
	return c
}
