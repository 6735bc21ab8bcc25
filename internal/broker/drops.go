package broker

import (
	"context"
	"log/slog"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Dropped messages: counted, and logged
//
// Every message the broker decides not to deliver is counted in
// bifrost_messages_dropped_total{reason} and logged, one line per reason a second at most
// (logging.Limiter): the first drop at once, with the client it was for, the topic and
// QoS where they are known and the publisher when it is a client; the drops that follow
// within the second are counted, and the second ends with that line again and
// suppressed=N. A drop that loses something a subscriber asked for (queue_full,
// slow_consumer, memory_pressure, too_large) is a warning; those the protocol or the
// operator ask for (expired: the publisher set the expiry; offline_qos0: QoS 0 is not
// kept for an offline session; acl_denied: the ACL in force; session_ended: what a
// session held when it expired or a CONNECT started it clean) are information, so that a
// broker working as configured does not warn every second.
//
// Two paths lead here. A delivery's drop is the one Deliver returns, with its topic and
// publisher. What a session drops on its own account, leaving its queue or window (the
// read ACL in force, the Maximum Packet Size of the connection it resumes on, expiry),
// comes back from Attach, Ack and Pump as a session.Drops, counts by reason that cost no
// allocation, logged with the client (droppedAll). The expiry sweep of offline queues
// logs its count without a client. At startup, what Restore drops (entries Load swept
// as expired, queues cut to their bounds) is counted and logged in one line by reason
// (droppedAtRestore).
//
// Counting is an atomic add. A drop not logged costs the Limiter's SkipN (a lock, no
// allocation), which counts a step's n drops as n in the second's suppressed=N, so that
// every drop is in the log once; the line, when it is logged, allocates.

// newDropLog returns the limiter of the drop lines, keyed by reason.
func newDropLog() *logging.Limiter { return logging.NewLimiter(1, time.Second) }

// dropLevel is the level of a drop's line.
func dropLevel(d session.Drop) slog.Level {
	switch d {
	case session.DropExpired, session.DropOffline, session.DropDenied, session.DropSessionEnded:
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// A dropCtx is what is known of n dropped messages: for whom (nil: several sessions),
// their topic (nil: unknown), QoS and publisher (nil: not a client).
type dropCtx struct {
	to    *session.Session
	topic []byte
	qos   uint8
	from  *session.Session
	n     int
}

// dropped counts and logs d, a drop of what c says (nothing if d is Delivered).
func (b *Broker) dropped(d session.Drop, c dropCtx) {
	if d == session.Delivered {
		return
	}
	if c.n == 0 {
		c.n = 1
	}
	b.stats.dropped[d].Add(uint64(c.n))
	level := dropLevel(d)
	if !b.log.Enabled(context.Background(), level) || b.drops.SkipN(d.String(), c.n) {
		return
	}
	args := make([]any, 0, 12)
	args = append(args, "reason", d.String())
	if c.to != nil {
		args = append(args, "client", c.to.ClientID())
	}
	if c.topic != nil {
		args = append(args, "topic", string(c.topic), "qos", int(c.qos))
	}
	if c.from != nil {
		args = append(args, "from", c.from.ClientID())
	}
	if c.n > 1 {
		args = append(args, "messages", c.n)
	}
	b.drops.Log(b.log, level, d.String(), "message dropped", args...)
}

// droppedAll counts and logs ds, what session s dropped leaving its queue or window
// (session.Drops: Attach, Ack, Pump).
func (b *Broker) droppedAll(s *session.Session, ds *session.Drops) {
	for d, n := range ds {
		if n != 0 {
			b.dropped(session.Drop(d), dropCtx{to: s, n: int(n)})
		}
	}
}

// droppedAtRestore counts ds, the messages Restore dropped by reason, and logs them in
// one line: a store may hold thousands of sessions, each with its drops.
func (b *Broker) droppedAtRestore(ds *session.Drops) {
	level := slog.LevelInfo
	var args []any
	for d, n := range ds {
		if n == 0 {
			continue
		}
		b.stats.dropped[d].Add(uint64(n))
		level = max(level, dropLevel(session.Drop(d)))
		args = append(args, session.Drop(d).String(), n)
	}
	if args != nil {
		b.log.Log(context.Background(), level, "store: messages dropped at restore", args...)
	}
}
