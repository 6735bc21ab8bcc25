package broker

import (
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Retained messages: a retained PUBLISH changes its topic's message in one of three
// ways, each below. On a node of a cluster the set is the cluster's (retainInCluster;
// cluster_retained.go has the cluster's side); with a store the change is staged in the
// Journal in the same critical section as in memory (retainDurable); otherwise it is the
// topic tree's alone. $SYS topics always take the third: they are per node and never
// stored.

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
		b.retMu.Lock()
		b.setRetainedLocked(topic, m)
		b.retMu.Unlock()
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
	b.retMu.Lock()
	defer b.retMu.Unlock()
	old, _ := b.ret.Get(topic)
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
		b.stats.m.RetainedMessages.Set(int64(b.ret.Len()))
	}
}

// Retained messages with a Message Expiry Interval (5.0, 3.3.2.3.3) are removed once it
// has passed, by the same broker-wide sweep that drops expired queued messages (sweep.go):
// from the topic tree and from the store, so that an expired retained message neither
// holds memory nor comes back at a restart. (It is never delivered after its expiry in
// any case: delivery checks it.) The broker keeps, under retMu, the expiry of every topic
// whose retained message carries one, and nothing for the others, so a broker whose
// retained messages do not expire pays nothing and its sweep timer never wakes for them.

// setRetainedLocked makes m topic's retained message in the tree (nil or an empty
// payload: clears it) and records its expiry for the sweep. retMu is held.
func (b *Broker) setRetainedLocked(topic []byte, m *session.Message) {
	if m == nil || len(m.Payload()) == 0 {
		b.ret.Delete(topic) // [MQTT-3.3.1-6], [MQTT-3.3.1-7]
		b.forgetExpiry(topic)
		return
	}
	b.ret.Set(topic, m) // [MQTT-3.3.1-5]
	if m.Expiry == 0 {
		b.forgetExpiry(topic)
		return
	}
	if b.retExp == nil {
		b.retExp = make(map[string]int64)
	}
	b.retExp[string(topic)] = m.Expiry
	b.armSweep()
}

// forgetExpiry drops topic's entry, if any; a broker without expiring retained messages
// does not even look (no key conversion on its retained publishes). retMu is held.
func (b *Broker) forgetExpiry(topic []byte) {
	if len(b.retExp) > 0 {
		delete(b.retExp, string(topic))
	}
}

// retainedExpiring reports whether some retained message carries an expiry.
func (b *Broker) retainedExpiring() bool {
	b.retMu.Lock()
	defer b.retMu.Unlock()
	return len(b.retExp) > 0
}

// sweepRetained removes the retained messages that have expired at now (Unix
// nanoseconds), from the tree and the Journal, and returns how many.
func (b *Broker) sweepRetained(now int64) int {
	b.retMu.Lock()
	defer b.retMu.Unlock()
	n := 0
	for topic, exp := range b.retExp {
		if exp > now {
			continue
		}
		delete(b.retExp, topic)
		t := []byte(topic)
		m, ok := b.ret.Get(t)
		if !ok || m.Expiry != exp {
			continue // replaced since; the new message has its own entry if it expires
		}
		b.ret.Delete(t)
		if b.j != nil && !sysTopic(t) {
			b.j.SetRetained(t, m, nil)
		}
		n++
	}
	if len(b.retExp) == 0 {
		b.retExp = nil // let a burst's map go
	}
	return n
}
