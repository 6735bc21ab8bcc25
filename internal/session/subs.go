package session

// A Sub is one of the session's subscriptions, kept to remove them when the session
// ends, to check them again when the ACL changes, and to persist them.
//
// 24 bytes: the filter, the identifier and the options packed in one word.
type Sub struct {
	Filter string
	ID     uint32 // subscription identifier, 0 none
	Opts   SubOpts
}

// SubOpts are a subscription's options as granted (spec 3.8.3.1).
type SubOpts struct {
	QoS               uint8 // the maximum QoS granted
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    uint8
}

// subSet is a session's subscriptions: a slice in the order they came, and past
// subIndexAt of them an index from filter to position, so that a SUBSCRIBE or UNSUBSCRIBE
// costs the same whatever the client holds already (a flood of subscriptions from one
// client must not turn quadratic).
//
// The session holds a *subSet, nil without subscriptions: an idle session without any
// pays one pointer, one with a few pays the 32-byte header besides its subscriptions,
// and only a session with many pays for the map. The rejected alternatives: a map for
// every session (about 250 bytes from its first entry), a slice header plus a map pointer in
// the Session (8 bytes more on every session, a larger size class), a sorted slice (each
// insert still moves n/2 entries).
type subSet struct {
	list  []Sub
	index map[string]int32 // filter → position in list; nil below subIndexAt entries
}

// subIndexAt is the number of subscriptions from which a set keeps its index: below it a
// scan of a few strings costs less than hashing one, and no map is allocated.
const subIndexAt = 16

// find returns the position of the subscription to filter, -1 if none.
func (ss *subSet) find(filter string) int {
	if ss == nil {
		return -1
	}
	if ss.index != nil {
		if i, ok := ss.index[filter]; ok {
			return int(i)
		}
		return -1
	}
	for i := range ss.list {
		if ss.list[i].Filter == filter {
			return i
		}
	}
	return -1
}

// add appends sub, whose filter the set does not hold, indexing the set once it is large.
func (ss *subSet) add(sub Sub) {
	ss.list = append(ss.list, sub)
	switch {
	case ss.index != nil:
		ss.index[sub.Filter] = int32(len(ss.list) - 1)
	case len(ss.list) >= subIndexAt:
		ss.reindex()
	}
}

// remove deletes the subscription at position i. With an index the last one takes its
// place (order does not matter to anyone past that size); below it the order is kept, and
// the index goes once the set has shrunk to half the size that built it.
func (ss *subSet) remove(i int) {
	last := len(ss.list) - 1
	if ss.index != nil {
		delete(ss.index, ss.list[i].Filter)
		if i != last {
			ss.list[i] = ss.list[last]
			ss.index[ss.list[i].Filter] = int32(i)
		}
		ss.list[last] = Sub{}
		ss.list = ss.list[:last]
		if len(ss.list) <= subIndexAt/2 {
			ss.index = nil
		}
		return
	}
	copy(ss.list[i:], ss.list[i+1:])
	ss.list[last] = Sub{}
	ss.list = ss.list[:last]
}

// reindex builds the index of the whole list.
func (ss *subSet) reindex() {
	ss.index = make(map[string]int32, len(ss.list))
	for i := range ss.list {
		ss.index[ss.list[i].Filter] = int32(i)
	}
}

// newSubSet returns the set of list (restored from the store), nil if it is empty.
func newSubSet(list []Sub) *subSet {
	if len(list) == 0 {
		return nil
	}
	ss := &subSet{list: list}
	if len(list) >= subIndexAt {
		ss.reindex()
	}
	return ss
}

// all returns the subscriptions, nil if there are none; the caller must not modify them.
func (ss *subSet) all() []Sub {
	if ss == nil {
		return nil
	}
	return ss.list
}

// Subs returns a copy of the session's subscriptions.
func (s *Session) Subs() []Sub {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sub(nil), s.subs.all()...)
}

// HasRoom reports whether a subscription to filter fits under a cap of max subscriptions
// (0: none): it does if the session has fewer, or already has one to filter (which it
// would replace).
func (s *Session) HasRoom(filter []byte, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max == 0 || len(s.subs.all()) < max || s.subs.find(string(filter)) >= 0
}

// AddSub records a subscription, replacing one to the same filter; it reports whether it
// replaced one.
func (s *Session) AddSub(sub Sub) (replaced bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.stageSubsLocked()
	if i := s.subs.find(sub.Filter); i >= 0 {
		s.subs.list[i] = sub
		return true
	}
	if s.subs == nil {
		s.subs = new(subSet)
	}
	s.subs.add(sub)
	return false
}

// RemoveSub forgets the subscription to filter and reports whether there was one.
func (s *Session) RemoveSub(filter []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.subs.find(string(filter))
	if i < 0 {
		return false
	}
	s.subs.remove(i)
	if len(s.subs.list) == 0 {
		s.subs = nil
	}
	s.stageSubsLocked()
	return true
}
