package pubsub

import (
	"bytes"
	"sync"
	"unsafe"
)

// Retained stores the retained message of each topic (MQTT 5 section 3.3.1.3) and finds
// those matching a new subscription's filter. T is the broker's message type, so that
// pubsub needs none. It is safe for concurrent use: Get, Match and Len share a read lock;
// Set and Delete take it exclusively.
//
// Topics live in the same pointer-free tree as the Index's filters; a node with a message
// holds the index of its entry (topic, value) in one dense paged array, which Delete keeps
// dense by moving the last entry into the hole. Entries keep the topic as a string because
// Match hands it out; the GC sees that string and whatever T points to, and nothing per
// tree node.
type Retained[T any] struct {
	mu      sync.RWMutex
	tree    tree
	entries paged[entry[T]] // node.val indexes it for nodes with n == 1
}

type entry[T any] struct {
	topic string
	v     T
	node  uint32
}

// NewRetained returns an empty store.
func NewRetained[T any]() *Retained[T] {
	r := &Retained[T]{tree: newTree()}
	r.tree.moved = r.nodeMoved
	return r
}

func (r *Retained[T]) nodeMoved(_, to uint32) {
	if n := r.tree.node(to); n.n != 0 {
		r.entries.at(n.val).node = to
	}
}

// Set stores v as the retained message of topic, replacing any, and copies topic. topic
// must be a valid topic name (packet.ValidTopicName).
func (r *Retained[T]) Set(topic []byte, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.tree.insert(topic)
	if n := r.tree.node(id); n.n != 0 {
		r.entries.at(n.val).v = v
	} else {
		n.val, n.n = r.entries.push(entry[T]{string(topic), v, id}), 1
	}
	r.tree.upkeep()
}

// Delete removes the retained message of topic (a PUBLISH with RETAIN and an empty payload,
// [MQTT-3.3.1-6]), and reports whether there was one.
func (r *Retained[T]) Delete(topic []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.tree.lookup(topic)
	if id == 0 || r.tree.node(id).n == 0 {
		return false
	}
	n := r.tree.node(id)
	e, last := n.val, r.entries.n-1
	if e != last {
		moved := *r.entries.at(last)
		*r.entries.at(e) = moved
		r.tree.node(moved.node).val = e
	}
	r.entries.pop()
	n.val, n.n = 0, 0
	r.tree.tidy(id)
	if r.entries.n == 0 {
		r.tree.reset()
		r.entries = paged[entry[T]]{}
	} else {
		r.tree.upkeep()
	}
	return true
}

// Get returns the retained message of topic.
func (r *Retained[T]) Get(topic []byte) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if id := r.tree.lookup(topic); id != 0 && r.tree.node(id).n != 0 {
		return r.entries.at(r.tree.node(id).val).v, true
	}
	var zero T
	return zero, false
}

// Len returns the number of retained messages.
func (r *Retained[T]) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return int(r.entries.n)
}

// Match calls fn for every retained topic that filter matches, under the rules of Index
// (the '$' rule included), until fn returns false. filter must be valid and not shared
// (the broker sends no retained messages for $share subscriptions [MQTT-3.8.4-? see 4.8.2]).
// fn runs under the read lock: it must not call Set or Delete.
func (r *Retained[T]) Match(filter []byte, fn func(topic string, v T) bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.matchBelow(0, filter, 0, fn)
}

// matchBelow matches filter[fp:] against the subtree under node x, whose label has been
// consumed; fp > len(filter) when the filter is consumed too. It returns false once fn
// asked to stop.
func (r *Retained[T]) matchBelow(x uint32, filter []byte, fp int, fn func(string, T) bool) bool {
	t := &r.tree
	if fp > len(filter) {
		return r.emit(x, fn)
	}
	level := filter[fp:levelEnd(filter, fp)]
	switch {
	case isPound(level):
		// '#' matches the parent level too [MQTT-4.7.1-2].
		if x != 0 && !r.emit(x, fn) {
			return false
		}
		for c := t.node(x).child; c != 0; c = t.node(c).next {
			if x == 0 && r.dollar(c) {
				continue
			}
			if !t.walk(c, func(y uint32) bool { return r.emit(y, fn) }) {
				return false
			}
		}
		return true
	case isPlus(level):
		for c := t.node(x).child; c != 0; c = t.node(c).next {
			if x == 0 && r.dollar(c) {
				continue
			}
			if !r.matchLabel(c, filter, fp, fn) {
				return false
			}
		}
		return true
	default:
		if c := t.find(x, level); c != 0 {
			return r.matchLabel(c, filter, fp, fn)
		}
		return true
	}
}

// matchLabel matches the levels of node c's label against the filter's from fp, then goes
// on below c.
func (r *Retained[T]) matchLabel(c uint32, filter []byte, fp int, fn func(string, T) bool) bool {
	lab := r.tree.label(c)
	for li := 0; ; {
		if fp > len(filter) {
			return true // the filter ends inside the label
		}
		fe := levelEnd(filter, fp)
		level := filter[fp:fe]
		if isPound(level) {
			return r.tree.walk(c, func(y uint32) bool { return r.emit(y, fn) })
		}
		le := levelEnd(lab, li)
		if !isPlus(level) && !bytes.Equal(level, lab[li:le]) {
			return true
		}
		if le == len(lab) {
			return r.matchBelow(c, filter, fe+1, fn)
		}
		li, fp = le+1, fe+1
	}
}

// dollar reports whether child c of the root starts with '$': [MQTT-4.7.2-1] such topics
// are not matched by a filter starting with a wildcard.
func (r *Retained[T]) dollar(c uint32) bool {
	lab := r.tree.label(c)
	return len(lab) > 0 && lab[0] == '$'
}

func (r *Retained[T]) emit(x uint32, fn func(string, T) bool) bool {
	n := r.tree.node(x)
	if n.n == 0 {
		return true
	}
	e := r.entries.at(n.val)
	return fn(e.topic, e.v)
}

// stats describes a store's storage for tests.
func (r *Retained[T]) stats() stats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := r.tree.stats()
	st.subs = int(r.entries.n)
	st.bytes += r.entries.capacity()*int(unsafe.Sizeof(entry[T]{})) + cap(r.entries.pages)*24
	return st
}
