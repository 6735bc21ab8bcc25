package broker

import (
	"sync"

	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Retained messages: a retained PUBLISH changes its topic's message in one of three
// ways, each below. On a node of a cluster the set is the cluster's (retainInCluster;
// cluster_retained.go has the cluster's side); with a store the change is staged in the
// Journal in the same critical section as in memory (retainDurable); otherwise it is the
// topic tree's alone. $SYS topics always take the third: they are per node and never
// stored.

// retainedMessages are the retained messages by topic and the expiry of those that carry
// one. mu orders the changes of tree between memory and the Journal and guards exp; tree
// has its own lock for its readers (SUBSCRIBE, the admin API).
type retainedMessages struct {
	mu   sync.Mutex
	tree *pubsub.Retained[*session.Message]
	exp  map[string]int64 // topic → expiry of its retained message, if it has one
}

// retain changes topic's retained message to m, the PUBLISH being delivered, and returns
// m (owned if it is kept) and whether the store has a change to commit before the
// publisher's acknowledgement.
func (b *Broker) retain(bt *batch, topic []byte, m *session.Message) (_ *session.Message, durable bool) {
	switch {
	case b.cluster != nil && !sysTopic(topic):
		b.retainInCluster(bt, m)
	case b.j != nil && !sysTopic(topic):
		m, durable = b.retainDurable(topic, m)
	default:
		if len(m.Payload()) > 0 {
			m = m.Own()
		}
		b.retained.mu.Lock()
		b.setRetainedLocked(topic, m)
		b.retained.mu.Unlock()
	}
	b.retainedGauge()
	return m, durable
}

// retainInCluster hands m, a retained PUBLISH, to the cluster; the acknowledgement that
// follows on this batch, for a client's QoS 1/2 PUBLISH, waits for it (sendAck).
func (b *Broker) retainInCluster(bt *batch, m *session.Message) {
	if m.QoS == 0 || bt.cluster.from == nil {
		b.cluster.Retain(m, nil)
		return
	}
	h := getRetainHold()
	bt.retained = h
	b.cluster.Retain(m, h.done)
}

// retainDurable changes topic's retained message to m (cleared when m's payload is
// empty) in memory and in the Journal, in one critical section so that the two see
// concurrent changes of a topic in the same order. It returns m, owned if it is kept, and
// whether anything was staged.
func (b *Broker) retainDurable(topic []byte, m *session.Message) (*session.Message, bool) {
	b.retained.mu.Lock()
	defer b.retained.mu.Unlock()
	old, _ := b.retained.tree.Get(topic)
	if len(m.Payload()) == 0 {
		if old == nil {
			return m, false
		}
		b.setRetainedLocked(topic, nil)
		b.j.SetRetained(topic, old, nil)
		return m, true
	}
	m = m.Own()
	b.setRetainedLocked(topic, m)
	b.j.SetRetained(topic, old, m)
	return m, true
}

// retainedGauge sets the retained messages' gauge.
func (b *Broker) retainedGauge() {
	if b.stats.m != nil {
		b.stats.m.RetainedMessages.Set(int64(b.retained.tree.Len()))
	}
}

// Retained messages with a Message Expiry Interval (5.0, 3.3.2.3.3) are removed once it
// has passed, by the same broker-wide sweep that drops expired queued messages (sweep.go):
// from the topic tree and from the store, so that an expired retained message neither
// holds memory nor comes back at a restart. (It is never delivered after its expiry in
// any case: delivery checks it.) The broker keeps, under retained.mu, the expiry of every
// topic whose retained message carries one, and nothing for the others, so a broker whose
// retained messages do not expire pays nothing and its sweep timer never wakes for them.

// setRetainedLocked makes m topic's retained message in the tree (nil or an empty
// payload: clears it) and records its expiry for the sweep. retained.mu is held.
func (b *Broker) setRetainedLocked(topic []byte, m *session.Message) {
	if m == nil || len(m.Payload()) == 0 {
		b.retained.tree.Delete(topic) // [MQTT-3.3.1-6], [MQTT-3.3.1-7]
		b.forgetExpiry(topic)
		return
	}
	b.retained.tree.Set(topic, m) // [MQTT-3.3.1-5]
	if m.Expiry == 0 {
		b.forgetExpiry(topic)
		return
	}
	if b.retained.exp == nil {
		b.retained.exp = make(map[string]int64)
	}
	b.retained.exp[string(topic)] = m.Expiry
	b.armSweep()
}

// forgetExpiry drops topic's entry, if any; a broker without expiring retained messages
// does not even look (no key conversion on its retained publishes). retained.mu is held.
func (b *Broker) forgetExpiry(topic []byte) {
	if len(b.retained.exp) > 0 {
		delete(b.retained.exp, string(topic))
	}
}

// retainedExpiring reports whether some retained message carries an expiry.
func (b *Broker) retainedExpiring() bool {
	b.retained.mu.Lock()
	defer b.retained.mu.Unlock()
	return len(b.retained.exp) > 0
}

// sweepRetained removes the retained messages that have expired at now (Unix
// nanoseconds), from the tree and the Journal, and returns how many.
func (b *Broker) sweepRetained(now int64) int {
	b.retained.mu.Lock()
	defer b.retained.mu.Unlock()
	n := 0
	for topic, exp := range b.retained.exp {
		if exp > now {
			continue
		}
		delete(b.retained.exp, topic)
		t := []byte(topic)
		m, ok := b.retained.tree.Get(t)
		if !ok || m.Expiry != exp {
			continue // replaced since; the new message has its own entry if it expires
		}
		b.retained.tree.Delete(t)
		if b.j != nil && !sysTopic(t) {
			b.j.SetRetained(t, m, nil)
		}
		n++
	}
	if len(b.retained.exp) == 0 {
		b.retained.exp = nil // let a burst's map go
	}
	return n
}
