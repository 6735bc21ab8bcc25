package fsm

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Retained messages in the replicated state: topic → message, the same set on every node.
// A retained PUBLISH on any node becomes one op of a Retains command (internal/cluster's
// retained.go batches the ops that arrive together into one entry); each node applying it
// changes its set and hands the change to the broker's retained store (RetainedStore),
// which serves new subscribers from it. The message the state holds is the one the broker's index holds:
// an owned session.Message, one buffer for topic, payload and properties, so the set
// costs its bytes once per node, plus the map entry.
//
// Expiry is an absolute deadline (Unix nanoseconds) carried by the op, so that every node
// applies the same value whatever its clock said when the entry arrived; delivery checks
// it against the local clock. The leader alone removes an expired message, by an expire op
// that clears the topic only if its message still has that deadline (a newer message set
// meanwhile stays).
//
// An op on the wire: [flags][topic][payload][props][expiry if flagExpiry], the three
// byte strings prefixed with their length (wire.go). flags: bits 0-1 QoS, flagExpiry,
// flagExpire. An empty payload clears the topic [MQTT-3.3.1-6].
//
// The snapshot section is the number of topics then each topic as an op (flags, topic,
// payload, props, expiry).

const kindRetain kind = 4 // Retains: retained messages set, cleared or expired

// Flags of a retain op (append-only).
const (
	retainQoS    = 0x03 // the message's QoS
	flagExpiry   = 0x04 // an expiry deadline follows
	flagExpire   = 0x08 // clear the topic if its message has this deadline (the leader's sweep)
	retainFlags  = retainQoS | flagExpiry | flagExpire
	maxRetainQoS = 2
)

// A RetainedStore is the broker's retained index on this node, which the replicated set
// drives. Its methods run on Raft's FSM goroutine under the FSM's lock (lock order: FSM,
// then the store's own): they must not block nor call back into the cluster.
type RetainedStore interface {
	// ApplyRetained makes m topic's retained message; nil clears the topic. m is owned
	// and immutable; the store may keep it.
	ApplyRetained(topic []byte, m *session.Message)
	// ReplaceRetained replaces the whole retained set (a snapshot restored): every topic
	// each yields is set, every other topic is cleared.
	ReplaceRetained(each func(yield func(topic []byte, m *session.Message) bool))
}

// A RetainOp is one retained change.
type RetainOp struct {
	Topic, Payload, Props []byte // an empty Payload clears Topic
	Expiry                int64  // Unix nanoseconds; 0: none
	QoS                   uint8
	Expire                bool // clear Topic only if its message expires at Expiry
}

// Retains is a batch of retained changes, applied in order; an op whose topic is not a
// valid topic name refuses the whole entry.
type Retains struct {
	Ops []RetainOp
}

func (Retains) kind() kind { return kindRetain }

func (c Retains) appendBody(b []byte) []byte {
	n := 10
	for i := range c.Ops {
		n += c.Ops[i].Size()
	}
	b = slices.Grow(b, n)
	b = appendUvarint(b, uint64(len(c.Ops)))
	for i := range c.Ops {
		b = c.Ops[i].append(b)
	}
	return b
}

func (o *RetainOp) append(b []byte) []byte {
	flags := o.QoS & retainQoS
	if o.Expiry != 0 {
		flags |= flagExpiry
	}
	if o.Expire {
		flags |= flagExpire
	}
	b = append(b, flags)
	b = appendBytes(b, o.Topic)
	b = appendBytes(b, o.Payload)
	b = appendBytes(b, o.Props)
	if o.Expiry != 0 {
		b = appendUvarint(b, uint64(o.Expiry))
	}
	return b
}

// Size is the op's encoded size, at most: what a batch of ops is bounded by.
func (o *RetainOp) Size() int {
	return 1 + 3*5 + len(o.Topic) + len(o.Payload) + len(o.Props) + 10
}

func decodeRetains(r *reader) Command {
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every op takes at least one byte
		r.err = errShort
		return Retains{}
	}
	c := Retains{Ops: make([]RetainOp, n)}
	for i := range c.Ops {
		c.Ops[i] = readRetainOp(r)
	}
	return c
}

// readRetainOp reads an op; its byte strings point into r's buffer.
func readRetainOp(r *reader) RetainOp {
	flags := r.byte()
	o := RetainOp{QoS: flags & retainQoS, Expire: flags&flagExpire != 0}
	o.Topic = r.bytes()
	o.Payload = r.bytes()
	o.Props = r.bytes()
	if flags&flagExpiry != 0 {
		o.Expiry = int64(r.uvarint())
	}
	if r.err == nil && (flags&^retainFlags != 0 || o.QoS > maxRetainQoS || o.Expire && o.Expiry == 0) {
		r.err = fmt.Errorf("cluster: retain op flags %#x", flags)
	}
	return o
}

// apply changes the set op by op. An op with a topic that is not a valid topic name is
// refused as a whole before anything changes, identically on every node.
func (c Retains) apply(s *state, index uint64) ([]byte, error) {
	for i := range c.Ops {
		if err := packet.ValidTopicName(c.Ops[i].Topic); err != nil {
			return nil, fmt.Errorf("cluster: retained topic %q: %w", c.Ops[i].Topic, err)
		}
	}
	for i := range c.Ops {
		s.ret.apply(&c.Ops[i])
	}
	if s.ret.applied != nil {
		s.ret.applied(index)
	}
	return nil, nil
}

// retainedSet is the retained part of the state.
type retainedSet struct {
	msgs map[string]*session.Message
	// exp holds the deadline of every topic whose message has one, so that the leader's
	// sweep looks at those only.
	exp map[string]int64
	// store receives every change; nil in tests that look at the set alone. It is the
	// node's, not replicated: FSM.Restore carries it over to the restored state.
	store RetainedStore
	// applied, when set, is told the index of each Retains entry applied (retained.go
	// opens the acknowledgements that waited for it); the node's too, carried over.
	applied func(index uint64)
}

// apply makes one op's change.
func (t *retainedSet) apply(o *RetainOp) {
	if o.Expire {
		m, ok := t.msgs[string(o.Topic)]
		if !ok || m.Expiry != o.Expiry {
			return // replaced or cleared since the sweep saw it
		}
	}
	if o.Expire || len(o.Payload) == 0 {
		delete(t.msgs, string(o.Topic))
		delete(t.exp, string(o.Topic))
		if t.store != nil {
			// Cleared even when the set did not have it: the broker may hold it from its
			// own store, written before this node's log was replayed.
			t.store.ApplyRetained(o.Topic, nil)
		}
		return
	}
	var b session.Message
	b.BorrowForwarded(o.Topic, o.Payload, o.Props, o.QoS, true, o.Expiry)
	m := b.Own()
	if t.msgs == nil {
		t.msgs = make(map[string]*session.Message)
	}
	if _, ok := t.msgs[string(o.Topic)]; ok {
		// The key is the old message's topic bytes (topicKey): it goes with it.
		delete(t.msgs, string(o.Topic))
		delete(t.exp, string(o.Topic))
	}
	key := topicKey(m)
	t.msgs[key] = m
	if o.Expiry != 0 {
		if t.exp == nil {
			t.exp = make(map[string]int64)
		}
		t.exp[key] = o.Expiry
	}
	if t.store != nil {
		t.store.ApplyRetained(m.Topic(), m)
	}
}

// topicKey returns m's topic as a string sharing m's buffer, without a copy: a map key
// for as long as the map holds m (an owned message's bytes never change).
func topicKey(m *session.Message) string {
	t := m.Topic()
	return unsafe.String(unsafe.SliceData(t), len(t))
}

// adopt takes over the node's store from old (the state before a Restore) and hands it
// the restored set.
func (t *retainedSet) adopt(old *retainedSet) {
	t.store, t.applied = old.store, old.applied
	if t.store != nil {
		t.store.ReplaceRetained(t.each)
	}
}

// each yields every retained message.
func (t *retainedSet) each(yield func(topic []byte, m *session.Message) bool) {
	for _, m := range t.msgs {
		if !yield(m.Topic(), m) {
			return
		}
	}
}

// expired returns the expire ops for the messages whose deadline is at or before now.
func (t *retainedSet) expired(now int64, max int) []RetainOp {
	var ops []RetainOp
	for topic, exp := range t.exp {
		if exp > now {
			continue
		}
		ops = append(ops, RetainOp{Topic: []byte(topic), Expiry: exp, Expire: true})
		if len(ops) == max {
			break
		}
	}
	return ops
}

// captureRetained copies the set's map (the messages are immutable and shared).
func captureRetained(s *state) func([]byte) []byte {
	msgs := make([]*session.Message, 0, len(s.ret.msgs))
	for _, m := range s.ret.msgs {
		msgs = append(msgs, m)
	}
	return func(b []byte) []byte {
		b = appendUvarint(b, uint64(len(msgs)))
		for _, m := range msgs {
			o := RetainOp{Topic: m.Topic(), Payload: m.Payload(), Props: m.Props(), QoS: m.QoS, Expiry: m.Expiry}
			b = o.append(b)
		}
		return b
	}
}

func restoreRetained(s *state, r *reader) {
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		o := readRetainOp(r)
		if r.err == nil && (o.Expire || len(o.Payload) == 0) {
			r.err = fmt.Errorf("cluster: snapshot holds a retained topic %q without a message", o.Topic)
		}
		if r.err == nil {
			s.ret.apply(&o)
		}
	}
}

// retained returns the replicated retained message of topic, if any (expired or not);
// for tests.
func (f *FSM) retained(topic string) (*session.Message, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.s.ret.msgs[topic]
	return m, ok
}

// RetainedLen returns the number of retained topics in the replicated set.
func (f *FSM) RetainedLen() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.s.ret.msgs)
}

// setRetainedStore connects the node's retained store and its applied hook; before Raft
// starts.
func (f *FSM) setRetainedStore(st RetainedStore, applied func(index uint64)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.ret.store, f.s.ret.applied = st, applied
}

// ExpiredRetained returns up to max expire ops for what has expired at now: the leader's
// sweep applies them as a Retains entry, which clears each topic only if its message
// still has the deadline.
func (f *FSM) ExpiredRetained(now int64, max int) []RetainOp {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.ret.expired(now, max)
}

func appendBytes(b, s []byte) []byte {
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// bytes reads a byte string, pointing into r's buffer.
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}
