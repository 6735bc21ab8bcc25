package session

import "github.com/bifrost-mqtt/bifrost/internal/store"

// Owned queues
//
// A bridge keeps its queue for the remote in the store with the records of a persistent
// session's queue: a session record under a client id no MQTT client can take (one that
// starts with U+0000, which no MQTT string may hold [MQTT-1.5.4-2]), then one queue
// entry per message in seq order, each referring to a message record of its own. Staged
// through the Journal, they go into the same batches as the sessions' changes, in the
// order they happen: a PUBACK held for the batch (SendDurable) covers them, Load sweeps
// and orders them as a session's, and the broker's resync rewrites them after a failed
// commit (the owner's rewrite function, registered with the broker).
//
// The owner serialises its changes and stages each under its own lock, as a session
// does: lock order, the owner's lock → Journal.mu. It calls Commit afterwards with no
// lock held, unless it stages on the publish path, whose round commits.

// StageOwner stages the session record of the owned queue clientID: it never expires and
// has no subscriptions.
func (j *Journal) StageOwner(clientID string) {
	b := j.begin()
	b.PutSession(store.SessionRecord{ClientID: clientID, Expiry: store.NeverExpire, Version: 5})
	j.end()
}

// StageOwnedEntry stages entry seq of the owned queue clientID, waiting to be sent, with
// its message r under id; id 0 takes a new message id. It returns the message's id.
func (j *Journal) StageOwnedEntry(clientID string, seq, id uint64, r *store.MessageRecord) uint64 {
	b := j.begin()
	defer j.end()
	if id == 0 {
		j.nextID++
		id = j.nextID
	}
	b.PutMessage(id, *r)
	b.PutQueued(clientID, seq, store.QueuedRecord{MessageID: id, QoS: r.QoS, Retain: r.Retain, State: store.StateQueued})
	return id
}

// StageOwnedSent stages that entry seq of the owned queue clientID, with its message id,
// was sent under packetID: a restart sends it again under that id, so that the receiver
// tells it from a new message (spec 4.3.3).
func (j *Journal) StageOwnedSent(clientID string, seq, id uint64, packetID uint16, qos uint8, retain bool) {
	b := j.begin()
	b.PutQueued(clientID, seq, store.QueuedRecord{MessageID: id, QoS: qos, Retain: retain, PacketID: packetID, State: store.StateSent})
	j.end()
}

// StageOwnedDone stages the deletion of entry seq of the owned queue clientID and of its
// message id.
func (j *Journal) StageOwnedDone(clientID string, seq, id uint64) {
	b := j.begin()
	b.DeleteQueued(clientID, seq)
	b.DeleteMessage(id)
	j.end()
}

// StageOwnerGone stages the deletion of the owned queue clientID, every record of it,
// and of the messages ids its entries refer to.
func (j *Journal) StageOwnerGone(clientID string, ids []uint64) {
	b := j.begin()
	b.DeleteSession(clientID)
	for _, id := range ids {
		b.DeleteMessage(id)
	}
	j.end()
}

// AwaitDurable has fn(gen, err) called, on the store's committer goroutine, once the
// current generation is reported (err nil: durable), and returns that generation; an
// owner that acknowledges what it staged holds the acknowledgement until then, as
// SendDurable does for a session. last is the generation the caller's previous call
// returned: when it is still the current one, fn is called for it already and is not
// added again. fn must not block. The caller commits afterwards.
func (j *Journal) AwaitDurable(last uint64, fn func(gen uint64, err error)) uint64 {
	j.begin() // marks the Journal staged: Commit hands the generation over
	defer j.end()
	c := j.cur
	if last != c.gen {
		c.owners = append(c.owners, fn)
	}
	return c.gen
}
