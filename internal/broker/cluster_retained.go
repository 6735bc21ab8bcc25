package broker

import (
	"sync"
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Retained messages on a node of a cluster: the set is the cluster's (Raft), not this
// node's. A retained PUBLISH (set, or clear with an empty payload) is handed to the
// cluster instead of changing the index here; every node, this one included, applies it
// through ApplyRetained, so each serves new subscribers from its own index. The live
// delivery of the message to current subscribers is unchanged. A QoS 1/2 publisher's
// PUBACK or PUBREC is held by a session.Gate until this node has applied the change, so
// that a subscriber that comes after the acknowledgement finds it here; a change the
// cluster did not apply closes the publisher's connection instead, so that the held
// acknowledgement never goes out and the client publishes again. The broker keeps the
// session: the cluster only calls done (a retainHold's). $SYS topics stay per node.

// A retainHold holds a QoS 1/2 PUBLISH's acknowledgement until the cluster has applied
// its retained change. left counts the two that must happen, in either order: the
// cluster's done and the Gate taken before the acknowledgement is encoded (hold). Pooled
// with its done, a method value made once per hold.
type retainHold struct {
	left    atomic.Int32
	applied atomic.Bool
	gate    session.Gate
	done    func(applied bool) // settled
}

var retainHolds sync.Pool // *retainHold

// getRetainHold returns a hold waiting for both.
func getRetainHold() *retainHold {
	h, _ := retainHolds.Get().(*retainHold)
	if h == nil {
		h = new(retainHold)
		h.done = h.settled
	}
	h.left.Store(2)
	return h
}

// settled is the cluster's done.
func (h *retainHold) settled(applied bool) {
	h.applied.Store(applied)
	h.release()
}

// hold holds the acknowledgement just encoded behind g.
func (h *retainHold) hold(g session.Gate) {
	h.gate = g
	h.release()
}

// release ends one of the two; the second opens the gate, or closes its connection with
// the held output if the change was not applied.
func (h *retainHold) release() {
	if h.left.Add(-1) != 0 {
		return
	}
	if h.applied.Load() {
		h.gate.Open()
	} else if s := h.gate.Session(); s != nil {
		if conn := s.Conn(); conn != nil {
			_ = conn.Close()
		}
	}
	h.gate = session.Gate{}
	h.applied.Store(false)
	retainHolds.Put(h)
}

// ApplyRetained makes m topic's retained message here (nil clears it), in the index and
// the store: the cluster's replicated set calls it for every change it applies
// (ClusterHost), on Raft's goroutine under the FSM's lock. The commit may wait
// for room in the store's queue, as a poller's does: backpressure reaches Raft's apply.
// The expiry is the cluster's business (its leader removes an expired message), so
// nothing is armed here.
func (b *Broker) ApplyRetained(topic []byte, m *session.Message) {
	b.retained.mu.Lock()
	b.applyRetainedLocked(topic, m)
	b.retained.mu.Unlock()
	b.commit()
	b.retainedGauge()
}

// applyRetainedLocked is ApplyRetained with retained.mu held.
func (b *Broker) applyRetainedLocked(topic []byte, m *session.Message) {
	old, _ := b.retained.tree.Get(topic)
	b.forgetExpiry(topic)
	if m == nil {
		if old == nil {
			return
		}
		b.retained.tree.Delete(topic)
		if b.j != nil {
			b.j.SetRetained(topic, old, nil)
		}
		return
	}
	b.retained.tree.Set(topic, m)
	if b.j != nil {
		b.j.SetRetained(topic, old, m)
	}
}

// ReplaceRetained replaces every retained message but $SYS's with those each yields: the
// cluster restored a snapshot of its set.
func (b *Broker) ReplaceRetained(each func(yield func(topic []byte, m *session.Message) bool)) {
	b.retained.mu.Lock()
	keep := make(map[string]struct{})
	each(func(topic []byte, m *session.Message) bool {
		keep[string(topic)] = struct{}{}
		b.applyRetainedLocked(topic, m)
		return true
	})
	var gone []string
	b.retained.tree.Match([]byte("#"), func(topic string, _ *session.Message) bool { // not $SYS [MQTT-4.7.2-1]
		if _, ok := keep[topic]; !ok {
			gone = append(gone, topic)
		}
		return true
	})
	for _, topic := range gone {
		b.applyRetainedLocked([]byte(topic), nil)
	}
	b.retained.mu.Unlock()
	b.commit()
	b.retainedGauge()
}
