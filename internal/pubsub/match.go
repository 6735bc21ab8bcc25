package pubsub

// Matches collects the result of a match. Reuse one per goroutine (Reset between topics):
// once its slices have grown to fit, matching allocates nothing.
type Matches struct {
	Subs   []Sub   // non-shared subscriptions, one per matching filter
	Groups []Group // shared groups, one per matching group

	stack []frame // Match's work list, kept for reuse
}

// frame is a node reached by a match, and where in the topic its label ends: the start of
// the next level, or len(topic)+1 once every level is consumed.
type frame struct {
	node uint32
	pos  uint32
}

// Reset empties m, keeping its memory.
func (m *Matches) Reset() {
	m.Subs = m.Subs[:0]
	m.Groups = m.Groups[:0]
}

// Match appends to m every non-shared subscription whose filter matches topic (a subscriber
// with several matching filters appears once per filter: the broker merges them), and one
// Group per matching shared group. topic must be a valid topic name
// (packet.ValidTopicName).
//
// The walk follows the topic down the tree: at each node, the child whose label matches
// the next levels (one table probe), the '+' child and the '#' child. Topics of any depth
// work: the work list lives in m, not in a fixed array.
func (x *Index) Match(topic []byte, m *Matches) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := &x.tree
	end := uint32(len(topic))
	// [MQTT-4.7.2-1] A topic starting with '$' does not match a filter starting with a
	// wildcard: skip the root's wildcard children.
	dollar := end > 0 && topic[0] == '$'
	st := append(m.stack[:0], frame{0, 0})
	for len(st) > 0 {
		f := st[len(st)-1]
		st = st[:len(st)-1]
		flags := t.node(f.node).flags
		if f.node == 0 && dollar {
			flags &^= flagPlus | flagPound
		}
		// '#' matches the parent level and any number below [MQTT-4.7.1-2]: "a/#" matches
		// "a", "a/" and "a/b/c".
		if flags&flagPound != 0 {
			x.collect(t.find(f.node, poundLevel), m)
		}
		if f.pos > end {
			x.collect(f.node, m)
			continue
		}
		e := uint32(levelEnd(topic, int(f.pos)))
		// '+' matches exactly one level, an empty one included [MQTT-4.7.1-3].
		if flags&flagPlus != 0 {
			st = append(st, frame{t.find(f.node, plusLevel), e + 1})
		}
		if c := t.find(f.node, topic[f.pos:e]); c != 0 {
			if lab := t.label(c); hasLevelPrefix(topic[f.pos:], lab) {
				st = append(st, frame{c, f.pos + uint32(len(lab)) + 1})
			}
		}
	}
	m.stack = st
}

// collect appends node id's subscriptions and groups to m.
func (x *Index) collect(id uint32, m *Matches) {
	n := x.tree.node(id)
	if n.n != 0 {
		m.Subs = append(m.Subs, x.slab.at(id>>pageShift, n.val, n.n)...)
	}
	if n.flags&flagGroups != 0 {
		for g := x.groups.heads[id]; g != 0; g = x.groups.list[g].next {
			m.Groups = append(m.Groups, Group{g, x.groups.list[g].gen})
		}
	}
}
