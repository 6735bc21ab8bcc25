package broker

import (
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

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
