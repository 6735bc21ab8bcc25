package pubsub

// table maps a child's key (parent id, first level of its label) to its node id. It stores
// no keys: each slot holds the key's 32-bit hash in the high half and the node id in the
// low half (0 = empty; the root, id 0, is never a child), and a probe compares the node's
// parent and label only when the hashes agree.
//
// It is an extendible hash table: the top bits of a hash pick a segment through a
// directory, and each segment is an open-addressing table with linear probing of at most
// 4,096 slots, indexed by the low bits. A full segment splits in two on its next hash bit
// (doubling the directory if needed), so growing never rehashes more than one segment: a
// single table of millions of slots would hold the index's write lock, and every Match,
// for tens of milliseconds at each doubling. Deletion shifts later entries back instead of
// leaving tombstones; a segment below 1/8 full halves. Segments never merge: after a mass
// removal they are each small (8 slots at least), and an emptied index starts afresh.
//
// At 8 bytes a slot and a load between 3/8 and 3/4 a node costs 11–21 bytes of table.
type table struct {
	dir   []uint32 // segment by the top depth bits of the hash
	segs  []segment
	depth uint8
	n     int // entries
}

type segment struct {
	slots []uint64
	n     int
	depth uint8 // the number of top hash bits its entries share
}

const (
	minSegSlots = 8
	maxSegSlots = 1 << 12
)

func slot(h, id uint32) uint64 { return uint64(h)<<32 | uint64(id) }

// seg returns the segment of hash h, or nil while the table is empty.
func (t *table) seg(h uint32) *segment {
	if len(t.dir) == 0 {
		return nil
	}
	return &t.segs[t.dir[uint64(h)>>(32-t.depth)]]
}

// insert adds id under hash h. The caller has checked that the key is not present.
func (t *table) insert(h, id uint32) {
	if len(t.dir) == 0 {
		t.dir = []uint32{0}
		t.segs = []segment{{slots: make([]uint64, minSegSlots)}}
	}
	s := t.seg(h)
	for (s.n+1)*4 > len(s.slots)*3 {
		if len(s.slots) < maxSegSlots {
			s.resize(2 * len(s.slots))
		} else {
			t.split(t.dir[uint64(h)>>(32-t.depth)])
			s = t.seg(h)
		}
	}
	s.put(slot(h, id))
	s.n++
	t.n++
}

// split moves the entries of segment i whose next hash bit is 1 to a new segment.
func (t *table) split(i uint32) {
	d := t.segs[i].depth
	if d == t.depth {
		if d == 20 { // 2^20 segments of 3,072 entries
			panic("pubsub: topic table full")
		}
		dir := make([]uint32, 2*len(t.dir))
		for j := range dir {
			dir[j] = t.dir[j>>1]
		}
		t.dir = dir
		t.depth++
	}
	old := t.segs[i].slots
	t.segs[i] = segment{slots: make([]uint64, len(old)), depth: d + 1}
	t.segs = append(t.segs, segment{slots: make([]uint64, len(old)), depth: d + 1})
	k := uint32(len(t.segs) - 1)
	bit := 31 - d // the hash bit that now tells the two apart
	for _, s := range old {
		if s == 0 {
			continue
		}
		to := &t.segs[i]
		if uint32(s>>32)>>bit&1 != 0 {
			to = &t.segs[k]
		}
		to.put(s)
		to.n++
	}
	// The directory entries of segment i whose next bit is 1 go to the new segment.
	for j := range t.dir {
		if t.dir[j] == i && j>>(t.depth-d-1)&1 != 0 {
			t.dir[j] = k
		}
	}
}

// put places s in the first free slot of its probe sequence.
func (s *segment) put(v uint64) {
	mask := len(s.slots) - 1
	i := int(uint32(v>>32)) & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = v
}

// index returns the slot holding id, which is in the segment under hash h.
func (s *segment) index(h, id uint32) int {
	mask := len(s.slots) - 1
	want := slot(h, id)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		if s.slots[i] == want {
			return i
		}
	}
}

// resize rehashes the segment into n slots, a power of two.
func (s *segment) resize(n int) {
	old := s.slots
	s.slots = make([]uint64, n)
	for _, v := range old {
		if v != 0 {
			s.put(v)
		}
	}
}

// replace puts id new in the slot of id old, both under hash h: a split or merge hands a key
// to another node.
func (t *table) replace(h, old, new uint32) {
	s := t.seg(h)
	s.slots[s.index(h, old)] = slot(h, new)
}

// remove deletes id, which is in the table under hash h, shifting back the entries after it
// that would otherwise become unreachable (Knuth's algorithm R). It halves the segment when
// it falls below 1/8 full, which allocates a little.
func (t *table) remove(h, id uint32) {
	s := t.seg(h)
	mask := len(s.slots) - 1
	i := s.index(h, id)
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		home := int(uint32(s.slots[j]>>32)) & mask
		// The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
		if (i < j && (home <= i || home > j)) || (i > j && home <= i && home > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
	s.n--
	t.n--
	if s.n*8 < len(s.slots) && len(s.slots) > minSegSlots {
		s.resize(len(s.slots) / 2)
	}
}

// slots counts the slots of every segment, for memory accounting.
func (t *table) slots() int {
	n := 0
	for i := range t.segs {
		n += len(t.segs[i].slots)
	}
	return n
}
