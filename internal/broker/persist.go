package broker

import (
	"bytes"

	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Persistence
//
// With a store (Restore), the broker keeps in it what a restart must find: persistent
// sessions (session expiry above 0: a 3.1.1 clean session 0, or a 5.0 Session Expiry
// Interval) with their subscriptions, queued and inflight QoS 1/2 messages, inbound QoS 2
// packet ids and wills, and the retained messages. The session package stages each change
// into the Journal as it makes it (session/journal.go explains the order, the holds and
// the failures); the broker adds the retained messages, commits, and restores (restore.go).
//
// Acknowledgements. A QoS 1/2 PUBLISH that a persistent session queued or that changed a
// retained message is acknowledged with Session.SendDurable: the PUBACK or PUBREC stays in
// the publisher's pending output until the store reports the batch durable under its sync
// policy, then the store's committer goroutine writes it. The event loop does not wait:
// it goes on reading, and whatever it encodes for that connection afterwards queues behind
// the held ack, so acks leave in the order their PUBLISHes came [MQTT-4.6.0-2],
// [MQTT-4.6.0-3]. A failed commit turns the 5.0 ack into 0x97 (disk full) or 0x80, and
// closes a 3.1.1 connection without it (it cannot say no): the broker stays up. QoS 0, and
// QoS 1/2 reaching only non-persistent sessions, never touch the store: their path is the
// same as without one.
//
// Commits. Every poller's round of events ends in a commit (EndRound), and every callback
// off the pollers that may have staged something ends in endBatch, which calls
// Journal.Commit (an atomic load when nothing is staged); so do the timers (wills,
// expiry) and Close. Commit hands the batch to the store's group commit, which
// merges the batches of all connections that arrive while an fsync runs.
//
// Not stored: $SYS topics (the broker publishes them again), the session a shared
// subscription entry came through (restored entries stay with their session), topic
// aliases (they die with the connection anyway), and sessions with expiry 0.

// commit hands what the Journal has staged to the store. No lock may be held.
func (b *Broker) commit() {
	if b.j != nil {
		b.j.Commit()
	}
}

// commitWait commits and waits until the store has reported every batch, so that held
// output is released (or failed).
func (b *Broker) commitWait() {
	if b.j != nil {
		b.j.Commit()
		b.j.Wait()
	}
}

// resync stages the broker's whole durable state again, after a failed commit left the
// store behind the memory (session/journal.go, Failure). The Journal calls it from
// Commit, with no other lock held.
func (b *Broker) resync() {
	b.mu.Lock()
	all := make([]*session.Session, 0, len(b.sessions.m))
	for _, s := range b.sessions.m {
		all = append(all, s)
	}
	b.mu.Unlock()
	for _, s := range all {
		s.Rewrite()
	}
	b.rewriteOwned()
	b.retained.mu.Lock()
	b.retained.tree.Match([]byte("#"), func(topic string, m *session.Message) bool {
		b.j.RewriteRetained(topic, m) // "#" does not match $SYS [MQTT-4.7.2-1]
		return true
	})
	b.retained.mu.Unlock()
	b.log.Warn("store: state written again after a failed commit", "sessions", len(all))
}

// sysTopic reports whether topic is the broker's own ($SYS), which is never stored.
func sysTopic(topic []byte) bool { return bytes.HasPrefix(topic, sysPrefix) }
