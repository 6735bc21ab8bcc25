package broker

import (
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Retained messages on a node of a cluster: the set is the cluster's (Raft), not this
// node's. A retained PUBLISH (set, or clear with an empty payload) is handed to the
// cluster instead of changing the index here; every node, this one included, applies it
// through ApplyRetained, so each serves new subscribers from its own index. The live
// delivery of the message to current subscribers is unchanged. A QoS 1/2 publisher's
// PUBACK or PUBREC is held by a session.Gate until this node has applied the change, so
// that a subscriber that comes after the acknowledgement finds it here. $SYS topics stay
// per node.

// ClusterRetained is the cluster's side of retained messages.
type ClusterRetained interface {
	// Retain hands the retained change m to the cluster and returns its number for
	// HoldRetained; 0 when a QoS 0 change was dropped (the cluster's queue full). m may
	// be borrowed: Retain copies it. It does not block.
	Retain(m *session.Message) uint64
	// HoldRetained opens g once the change numbered seq is applied on this node, at once
	// if it is already.
	HoldRetained(seq uint64, g session.Gate)
}

// retainInCluster hands m, a retained PUBLISH, to the cluster; the acknowledgement that
// follows on this batch waits for it (holdRetained).
func (b *Broker) retainInCluster(bt *batch, m *session.Message) {
	bt.retained = b.cluster.Retain(m)
}

// holdRetained holds s's output from the acknowledgement about to be encoded until the
// retained change this PUBLISH handed to the cluster is applied here.
func (b *Broker) holdRetained(bt *batch, s *session.Session) {
	b.cluster.HoldRetained(bt.retained, s.Gate())
	bt.retained = 0
}

// ApplyRetained makes m topic's retained message here (nil clears it), in the index and
// the store: the cluster's replicated set calls it for every change it applies
// (ClusterHost), on Raft's goroutine under the FSM's lock. The commit may wait
// for room in the store's queue, as a poller's does: backpressure reaches Raft's apply.
// The expiry is the cluster's business (its leader removes an expired message), so
// nothing is armed here.
func (b *Broker) ApplyRetained(topic []byte, m *session.Message) {
	b.retMu.Lock()
	b.applyRetainedLocked(topic, m)
	b.retMu.Unlock()
	b.commit()
	b.retainedGauge()
}

// applyRetainedLocked is ApplyRetained with retMu held.
func (b *Broker) applyRetainedLocked(topic []byte, m *session.Message) {
	old, _ := b.ret.Get(topic)
	b.forgetExpiry(topic)
	if m == nil {
		if old == nil {
			return
		}
		b.ret.Delete(topic)
		if b.j != nil {
			b.j.SetRetained(topic, old, nil)
		}
		return
	}
	b.ret.Set(topic, m)
	if b.j != nil {
		b.j.SetRetained(topic, old, m)
	}
}

// ReplaceRetained replaces every retained message but $SYS's with those each yields: the
// cluster restored a snapshot of its set.
func (b *Broker) ReplaceRetained(each func(yield func(topic []byte, m *session.Message) bool)) {
	b.retMu.Lock()
	keep := make(map[string]struct{})
	each(func(topic []byte, m *session.Message) bool {
		keep[string(topic)] = struct{}{}
		b.applyRetainedLocked(topic, m)
		return true
	})
	var gone []string
	b.ret.Match([]byte("#"), func(topic string, _ *session.Message) bool { // not $SYS [MQTT-4.7.2-1]
		if _, ok := keep[topic]; !ok {
			gone = append(gone, topic)
		}
		return true
	})
	for _, topic := range gone {
		b.applyRetainedLocked([]byte(topic), nil)
	}
	b.retMu.Unlock()
	b.commit()
	b.retainedGauge()
}
