package broker

import (
	"bytes"
	"cmp"
	"slices"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// The publish path
//
// A PUBLISH is handled on the event loop of the connection that sent it, in five steps:
//
//  1. onPublish checks it against what the broker offers (maximum QoS, retain) and the
//     session's state (topic alias, QoS 2 packet ids).
//  2. route borrows it as a session.Message that points into the read buffer: no copy yet.
//  3. deliver updates the retained store (which owns a copy), matches the topic in the
//     index and merges overlapping subscriptions of one subscriber into one delivery at the
//     highest QoS carrying every subscription identifier [MQTT-3.3.4-2], [MQTT-3.3.4-3].
//  4. Each recipient session takes its delivery: QoS 0 is encoded into the session's
//     pending buffer at once (so a QoS 0 message is never copied), QoS 1 and 2 enter the
//     session's window or queue, which keep one owned copy shared by all recipients.
//  5. The batch flushes every session that got bytes, once, when the poller's round of
//     events ends (EndRound; off the pollers, when the call returns: endBatch).
//
// With a store (persist.go), step 3 and 4 also stage what persistent sessions and retained
// topics keep into the Journal's batch, and the PUBACK or PUBREC of a PUBLISH that any of
// them kept is sent with SendDurable: held until the batch is durable. The round's end
// commits the batch; the event loop never waits for the disk.
//
// The alternatives rejected: a goroutine or channel per subscriber (memory per idle
// connection, and a context switch per message), and copying every message up front (an
// allocation per QoS 0 message that nobody keeps).

var (
	errQoSNotSupported    = &packet.Error{Code: packet.QoSNotSupported, Rule: "MQTT-3.2.2-11", Text: "PUBLISH above the maximum QoS"}
	errRetainNotSupported = &packet.Error{Code: packet.RetainNotSupported, Rule: "MQTT-3.2.2-14", Text: "retained PUBLISH while retain is not available"}
	errReceiveMaximum     = &packet.Error{Code: packet.ReceiveMaximumExceeded, Rule: "MQTT-3.3.4-9", Text: "more QoS 2 messages in flight than the receive maximum"}
	sysPrefix             = []byte("$SYS/")
)

// onPublish handles an inbound PUBLISH and acknowledges it.
func (b *Broker) onPublish(bt *batch, cl *client, p *packet.Publish) error {
	s := cl.s
	if p.QoS > cl.set.maxQoS {
		return errQoSNotSupported
	}
	if p.Retain && !cl.set.retainAvailable {
		return errRetainNotSupported
	}
	if !b.publishAllowed(cl, now()) {
		b.stats.denied("publish_rate")
		return errPublishRate
	}
	topic, err := s.ResolveTopic(p)
	if err != nil {
		return err
	}
	lim := b.live.limits.Load()
	if !lim.topicOK(topic) {
		return errTopicLimits
	}
	b.stats.received[p.QoS].Add(1)
	// $SYS belongs to the broker: like Mosquitto, a client's publish there is accepted
	// and acknowledged, but not routed; a bridge's state is the exception (connstate.go).
	internal := bytes.HasPrefix(topic, sysPrefix)
	switch {
	case internal && b.publishState(cl, topic):
		internal = false
	case b.realms.sec[cl.realm].Authorizer != nil && !b.allowSession(s, auth.Write, topic):
		return b.publishDenied(bt, cl, p)
	}
	bt.from = s // for route's deliveries
	if lim.backpressure {
		bt.hold = holder{b: b, cl: cl}
	}
	defer func() { bt.from, bt.hold = nil, holder{} }()
	switch p.QoS {
	case 0:
		if !internal {
			b.route(bt, p, topic, s)
		}
	case 1:
		n, durable := 0, false
		if !internal {
			n, durable = b.route(bt, p, topic, s)
		}
		ack := &bt.ack
		*ack = packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID, Props: ack.Props}
		ack.Props.Reset()
		if n == 0 && cl.r.Version == packet.V5 {
			ack.Code = packet.NoMatchingSubscribers
		}
		b.sendAck(bt, s, ack, durable)
	case 2:
		dup, full := s.ReceiveQoS2(p.PacketID)
		if full {
			return errReceiveMaximum
		}
		n, durable := 1, false
		if !dup && !internal {
			n, durable = b.route(bt, p, topic, s)
		}
		ack := &bt.ack
		*ack = packet.Ack{PacketType: packet.PUBREC, PacketID: p.PacketID, Props: ack.Props}
		ack.Props.Reset()
		if n == 0 && cl.r.Version == packet.V5 {
			ack.Code = packet.NoMatchingSubscribers
		}
		// A persistent publisher's packet id awaiting PUBREL is stored too.
		b.sendAck(bt, s, ack, durable || b.j != nil && s.Persistent())
	}
	return nil
}

// publishDenied answers a PUBLISH the ACL refuses. A v5 client learns it from the
// PUBACK or PUBREC (0x87, which ends a QoS 2 exchange [MQTT-4.3.3-4]); older clients have
// no way to be told, so, as Mosquitto does, the message is acknowledged and dropped: a
// refusal they cannot read would only make them resend.
func (b *Broker) publishDenied(bt *batch, cl *client, p *packet.Publish) error {
	b.stats.denied("publish")
	s := cl.s
	if p.QoS == 0 {
		return nil
	}
	ack := &bt.ack
	*ack = packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID, Props: ack.Props}
	ack.Props.Reset()
	if p.QoS == 2 {
		ack.PacketType = packet.PUBREC
		if cl.r.Version != packet.V5 {
			// The exchange goes on to PUBREL/PUBCOMP like any other.
			if _, full := s.ReceiveQoS2(p.PacketID); full {
				return errReceiveMaximum
			}
		}
	}
	if cl.r.Version == packet.V5 {
		ack.Code = packet.NotAuthorized
	}
	b.sendAck(bt, s, ack, false)
	return nil
}

// sendAck sends a PUBACK or PUBREC, held until the store has what it acknowledges if
// durable (persist.go), until every peer the cluster forwarded the message to has it
// (cluster_routes.go), and until the cluster applied the retained change it made here
// (cluster_retained.go). The cluster's holds share one Gate, taken as the acknowledgement
// is encoded: one critical section of the publisher's session, and no flush of output
// that is held.
func (b *Broker) sendAck(bt *batch, s *session.Session, ack *packet.Ack, durable bool) {
	fh, rh := bt.cluster.held, bt.retained
	if fh == nil && rh == nil {
		if durable {
			bt.mark(s, s.SendDurable(ack))
		} else {
			bt.mark(s, s.Send(ack))
		}
		return
	}
	bt.cluster.held, bt.retained = nil, nil
	gates := 0
	if fh != nil {
		gates++
	}
	if rh != nil {
		gates++
	}
	flush, g := s.SendGated(ack, gates, durable)
	bt.mark(s, flush)
	if fh != nil {
		fh.hold(g)
	}
	if rh != nil {
		rh.hold(g)
	}
}

// onPubrel completes an inbound QoS 2 exchange with PUBCOMP (0x92 for an unknown packet
// id in 5.0, spec 3.7.2.1).
func (b *Broker) onPubrel(bt *batch, cl *client, a *packet.Ack) {
	known := cl.s.Release(a.PacketID)
	ack := &bt.ack
	*ack = packet.Ack{PacketType: packet.PUBCOMP, PacketID: a.PacketID, Props: ack.Props}
	ack.Props.Reset()
	if !known {
		ack.Code = packet.PacketIdentifierNotFound
	}
	bt.mark(cl.s, cl.s.Send(ack))
}

// route publishes p (topic resolved) from session s, borrowing it from the read
// buffer. It returns the number of recipients, and whether the store keeps it (a
// persistent recipient, a retained change): its acknowledgement must then wait.
func (b *Broker) route(bt *batch, p *packet.Publish, topic []byte, s *session.Session) (n int, durable bool) {
	bt.props = bt.msg.Borrow(p, topic, s.ID(), time.Now(), bt.props)
	if b.cluster == nil {
		return b.deliver(bt, &bt.msg)
	}
	bt.cluster.from = s // a peer's acknowledgement gates the PUBACK or PUBREC (cluster_routes.go)
	n, durable = b.deliver(bt, &bt.msg)
	bt.cluster.from = nil
	return n, durable
}

// routeOwned publishes a message the broker already owns (wills, $SYS, in-process).
func (b *Broker) routeOwned(bt *batch, m *session.Message) int {
	n, _ := b.deliver(bt, m)
	return n
}

// recipient is one merged delivery before its session is looked up.
type recipient struct {
	id    pubsub.SubscriberID
	d     session.Delivery
	check bool // the ACL must allow the recipient to read the topic (pubsub.CheckRead)
}

// deliver is steps 3 to 4 of the publish path.
func (b *Broker) deliver(bt *batch, m *session.Message) (n int, durable bool) {
	topic := m.Topic()
	if m.Retain && !bt.cluster.forwarded { // a forwarded message is retained by its origin's path
		m, durable = b.retain(bt, topic, m)
	}
	bt.matches.Reset()
	b.index.Match(topic, &bt.matches)
	rs := b.merge(bt, m)
	nowNs := now()
	pooled := false // m is the pools' copy, referenced by this call until it returns
	for i := range rs {
		r := &rs[i]
		if r.d.QoS > 0 && m.Borrowed() {
			m, pooled = m.OwnPooled(), true // the first recipient that keeps it makes the one copy
		}
		r.d.Msg = m
		took, stored := b.deliverTo(bt, r.id, r.d, nowNs, r.check)
		if took {
			n++
		}
		durable = durable || stored
	}
	groups := bt.matches.Groups
	if bt.cluster.forwarded {
		groups = nil // the origin gave the message to one member cluster-wide (Inbound.Deliver)
	}
	for _, g := range groups {
		if m.QoS > 0 && m.Borrowed() {
			m, pooled = m.OwnPooled(), true // the member may keep it: the same one copy
		}
		var took, stored bool
		if b.cluster == nil {
			took, stored = b.deliverShared(bt, g, m, nowNs, 0)
		} else if took, stored = b.deliverSharedOnline(bt, g, m, nowNs, 0); took {
			bt.cluster.out.Served = append(bt.cluster.out.Served, b.index.GroupName(g))
		} else {
			bt.cluster.unserved = append(bt.cluster.unserved, g)
		}
		if took {
			n++
		}
		durable = durable || stored
	}
	if b.cluster != nil && !bt.cluster.forwarded && !sysTopic(topic) {
		k, stored := b.forward(bt, m, nowNs)
		n += k
		durable = durable || stored
	}
	if pooled {
		m.Release()
	}
	return n, durable
}

// merge turns the matched subscriptions into one delivery per subscriber: No Local
// subscriptions of the publisher are dropped [MQTT-3.8.3-3], overlapping ones are merged at
// the highest QoS with all their subscription identifiers [MQTT-3.3.4-2]. The QoS is the
// lower of the message's and the subscription's [MQTT-3.8.4-8]; the retain flag is kept
// only for Retain As Published subscriptions [MQTT-3.3.1-12], [MQTT-3.3.1-13].
func (b *Broker) merge(bt *batch, m *session.Message) []recipient {
	subs := bt.matches.Subs
	if m.Origin != 0 {
		keep := subs[:0]
		for _, s := range subs {
			if s.Flags&pubsub.NoLocal == 0 || uint32(s.Subscriber) != m.Origin {
				keep = append(keep, s)
			}
		}
		subs = keep
	}
	if len(subs) > 1 {
		slices.SortFunc(subs, func(a, b pubsub.Sub) int { return cmp.Compare(a.Subscriber, b.Subscriber) })
	}
	rs := bt.recipients[:0]
	for i := 0; i < len(subs); {
		j := i + 1
		for j < len(subs) && subs[j].Subscriber == subs[i].Subscriber {
			j++
		}
		r := recipient{id: subs[i].Subscriber, check: true}
		for _, s := range subs[i:j] {
			// One subscription whose filter the ACL lets it read whole is enough.
			r.check = r.check && s.Flags&pubsub.CheckRead != 0
			r.d.QoS = max(r.d.QoS, min(s.QoS, m.QoS))
			if s.Flags&pubsub.RetainAsPublished != 0 && m.Retain {
				r.d.Retain = true
			}
			switch {
			case s.ID == 0:
			case r.d.SubID == 0:
				r.d.SubID = s.ID
			default:
				r.d.More = append(r.d.More, s.ID) // rare: several identifiers for one client
			}
		}
		rs = append(rs, r)
		i = j
	}
	bt.recipients = rs
	return rs
}

// deliverTo hands d to the recipient id names and reports whether it took it, and
// whether it stored it (session.DeliverStored).
// With check, the ACL must let the recipient read the topic (Mosquitto checks every
// delivery; bifrost only those of subscriptions the ACL does not cover whole).
func (b *Broker) deliverTo(bt *batch, id pubsub.SubscriberID, d session.Delivery, nowNs int64, check bool) (took, stored bool) {
	b.ids.mu.RLock()
	t := b.lookup(id)
	b.ids.mu.RUnlock()
	switch {
	case t.tap != nil:
		return true, t.tap(d.Msg, d.QoS, d.Retain)
	case t.s == nil:
		return false, false
	case check && !b.allowSession(t.s, auth.Read, d.Msg.Topic()):
		b.stats.denied("deliver")
		return false, false
	}
	if bt.hold.cl != nil && d.QoS > 0 {
		d.Hold = &bt.hold
	}
	dirtied, drop, stored := t.s.DeliverStored(d, nowNs)
	bt.mark(t.s, dirtied)
	if drop != session.Delivered {
		b.dropped(drop, dropCtx{to: t.s, topic: d.Msg.Topic(), qos: d.QoS, from: bt.from})
	}
	return drop == session.Delivered, stored
}

// deliverShared gives m to one member of shared group g: round robin over the members
// that are online (spec 4.8.2 leaves the strategy to the server), else to an offline
// member whose persistent session queues it. skip excludes a member (the one that just
// disconnected, on redelivery).
func (b *Broker) deliverShared(bt *batch, g pubsub.Group, m *session.Message, nowNs int64, skip uint32) (took, stored bool) {
	sub, ok := b.pickOnline(g, skip)
	if !ok {
		sub, ok = b.index.Pick(g, func(s pubsub.Sub) bool { return uint32(s.Subscriber) != skip })
		if !ok {
			return false, false
		}
	}
	return b.deliverMember(bt, g, sub, m, nowNs)
}

// pickOnline picks, round robin, an online member of g other than skip.
func (b *Broker) pickOnline(g pubsub.Group, skip uint32) (pubsub.Sub, bool) {
	return b.index.Pick(g, func(s pubsub.Sub) bool {
		if uint32(s.Subscriber) == skip {
			return false
		}
		b.ids.mu.RLock()
		t := b.lookup(s.Subscriber)
		b.ids.mu.RUnlock()
		return t.tap != nil || (t.s != nil && t.s.Online())
	})
}

// deliverMember gives m to sub, the chosen member of group g.
func (b *Broker) deliverMember(bt *batch, g pubsub.Group, sub pubsub.Sub, m *session.Message, nowNs int64) (took, stored bool) {
	d := session.Delivery{QoS: min(sub.QoS, m.QoS), SubID: sub.ID, Share: b.index.GroupName(g)}
	if sub.Flags&pubsub.RetainAsPublished != 0 {
		d.Retain = m.Retain
	}
	if d.QoS > 0 {
		m = m.Own()
	}
	d.Msg = m
	return b.deliverTo(bt, sub.Subscriber, d, nowNs, sub.Flags&pubsub.CheckRead != 0)
}

// redeliverShared sends a message that reached session from via a shared subscription,
// unacknowledged when its connection ended, to another member of the group (spec 4.8.2).
// On a node of a cluster, an online member here comes first, then a node with members
// (cluster_routes.go). When no other member takes it, from's session keeps it, queued
// as any message for it (or dropped and counted as one would be): its publisher was told
// it is safe. d holds the reference of the entry it came from (Session.Detach), let go
// here.
func (b *Broker) redeliverShared(bt *batch, from *session.Session, d session.Delivery) {
	defer d.Msg.Release()
	g, ok := b.index.GroupOf([]byte(d.Share))
	if b.cluster != nil {
		if ok {
			if took, _ := b.deliverSharedOnline(bt, g, d.Msg, now(), from.ID()); took {
				return
			}
		}
		if b.cluster.ForwardShared(d.Msg, d.Share) {
			return
		}
	}
	if ok {
		if took, _ := b.deliverShared(bt, g, d.Msg, now(), from.ID()); took {
			return
		}
	}
	b.deliverTo(bt, pubsub.SubscriberID(from.ID()), d, now(), false) // the ACL is checked as it leaves
}
