package broker

import (
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// retainReq is a subscription that asks for the retained messages of its filter, sent
// after the SUBACK.
type retainReq struct {
	filter []byte
	qos    uint8
	subID  uint32
	check  bool // read access to each retained topic must be checked (pubsub.CheckRead)
}

// onSubscribe handles SUBSCRIBE: each filter enters the index with the QoS granted (the
// lower of the asked and the broker's maximum [MQTT-3.8.4-6]), SUBACK answers with one code
// per filter in order [MQTT-3.8.4-7], and retained messages follow per retain handling
// [MQTT-3.3.1-9], [MQTT-3.3.1-10], [MQTT-3.3.1-11] (none for shared subscriptions
// [MQTT-3.8.4-?]: spec 4.8.2).
func (b *Broker) onSubscribe(bt *batch, cl *client, p *packet.Subscribe) error {
	s := cl.s
	var subID uint32
	if len(p.Props.SubscriptionIDs) > 0 {
		subID = p.Props.SubscriptionIDs[0]
	}
	ack := &bt.suback
	ack.PacketID = p.PacketID
	ack.Codes = ack.Codes[:0]
	ack.Props.Reset()
	var reqs [8]retainReq
	want := reqs[:0]
	var routed *subscribeGate // SUBACK means routed (cluster_routes.go)
	if b.cluster != nil {
		routed = &subscribeGate{gate: s.Gate()}
		routed.left.Store(1)
	}
	lim := b.live.limits.Load()
	for i := range p.Subscriptions {
		sub := &p.Subscriptions[i]
		if cl.bridge {
			// A Mosquitto bridge (3.1.1 with its marker) gets what a 5.0 bridge asks for:
			// its own messages are not echoed back to it, which would loop them between
			// the brokers, and the retain flag crosses as published.
			_, _, shared := packet.SplitShared(sub.Filter)
			sub.NoLocal = !shared
			sub.RetainAsPublished = true
		}
		granted := min(sub.QoS, cl.set.maxQoS)
		if !lim.topicOK(sub.Filter) {
			ack.Codes = append(ack.Codes, packet.TopicFilterInvalid)
			continue
		}
		if !s.HasRoom(sub.Filter, lim.maxSubs) {
			b.stats.denied("max_subscriptions")
			ack.Codes = append(ack.Codes, packet.QuotaExceeded)
			continue
		}
		check, ok := b.authorizeSub(s, sub.Filter)
		if !ok {
			// v5 0x87; 3.1.1 has only "failure" (0x80), which the SUBACK encoding maps.
			ack.Codes = append(ack.Codes, packet.NotAuthorized)
			continue
		}
		var flags uint8
		if check {
			flags |= pubsub.CheckRead
		}
		if sub.NoLocal {
			flags |= pubsub.NoLocal
		}
		if sub.RetainAsPublished {
			flags |= pubsub.RetainAsPublished
		}
		filter := string(sub.Filter) // the session's, shared with the cluster's route queues
		existed := b.indexSubscribe(sub.Filter, filter, pubsub.Sub{Subscriber: pubsub.SubscriberID(s.ID()), ID: subID, QoS: granted, Flags: flags}, routed)
		s.AddSub(session.Sub{Filter: filter, ID: subID, Opts: session.SubOpts{QoS: granted,
			NoLocal: sub.NoLocal, RetainAsPublished: sub.RetainAsPublished, RetainHandling: sub.RetainHandling}})
		if !existed {
			b.stats.subscriptions(1)
		}
		ack.Codes = append(ack.Codes, packet.ReasonCode(granted))
		_, _, shared := packet.SplitShared(sub.Filter)
		if !shared && cl.set.retainAvailable && (sub.RetainHandling == 0 || sub.RetainHandling == 1 && !existed) {
			want = append(want, retainReq{filter: sub.Filter, qos: granted, subID: subID, check: check})
		}
	}
	bt.mark(s, s.Send(ack))
	if routed != nil {
		routed.done()
	}
	nowNs := now()
	for _, r := range want {
		b.retained.tree.Match(r.filter, func(topic string, m *session.Message) bool {
			if r.check && !b.allowSession(s, auth.Read, []byte(topic)) {
				b.stats.denied("deliver")
				return true
			}
			// Retained messages are sent with the retain flag set [MQTT-3.3.1-8].
			d := session.Delivery{Msg: m, QoS: min(m.QoS, r.qos), Retain: true, SubID: r.subID}
			dirtied, drop := s.Deliver(d, nowNs)
			bt.mark(s, dirtied)
			b.dropped(drop, dropCtx{to: s, topic: []byte(topic), qos: d.QoS})
			return true
		})
	}
	return nil
}

// authorizeSub asks the ACL whether s may subscribe to filter (a shared subscription is
// judged by its filter, without the $share/group/ prefix) and whether its deliveries must
// be checked one by one: unless the authorizer says the filter is readable whole
// (auth.Covering), they are.
func (b *Broker) authorizeSub(s *session.Session, filter []byte) (check, ok bool) {
	user, realm := s.Identity()
	a := b.realms.sec[realm].Authorizer
	if a == nil {
		return false, true
	}
	if _, f, shared := packet.SplitShared(filter); shared {
		filter = f
	}
	cid := s.ClientID()
	if !a.Allow(user, cid, auth.Subscribe, string(filter)) {
		b.stats.denied("subscribe")
		return false, false
	}
	c, ok := a.(auth.Covering)
	return !ok || !c.Covers(user, cid, string(filter)), true
}

// distrust marks every subscription of s to have each delivery checked against the ACL:
// what its filters may read was judged for another identity or another ACL.
func (b *Broker) distrust(s *session.Session) {
	for _, sub := range s.Subs() {
		flags := pubsub.CheckRead
		if sub.Opts.NoLocal {
			flags |= pubsub.NoLocal
		}
		if sub.Opts.RetainAsPublished {
			flags |= pubsub.RetainAsPublished
		}
		b.reindexSub([]byte(sub.Filter), pubsub.Sub{Subscriber: pubsub.SubscriberID(s.ID()), ID: sub.ID, QoS: sub.Opts.QoS, Flags: flags})
	}
}

// reindexSub replaces the options of a subscription the index has. One that left it
// meanwhile (an UNSUBSCRIBE, the session's end, on another goroutine than a reload's) is
// not brought back: the index would keep a subscription of no session, and on a node of
// a cluster a filter that looks routed (cluster_routes.go).
func (b *Broker) reindexSub(filter []byte, sub pubsub.Sub) {
	if b.cluster != nil {
		b.routeMu.Lock()
		defer b.routeMu.Unlock()
	}
	if !b.index.Subscribe(filter, sub) {
		b.index.Unsubscribe(filter, sub.Subscriber)
	}
}

// ACLChanged is called when the ACL in force changed (a reload): subscriptions judged
// under the old one have their deliveries checked from now on.
func (b *Broker) ACLChanged() {
	b.mu.Lock()
	all := make([]*session.Session, 0, len(b.sessions.m))
	for _, s := range b.sessions.m {
		all = append(all, s)
	}
	b.mu.Unlock()
	for _, s := range all {
		b.distrust(s)
	}
}

// onUnsubscribe handles UNSUBSCRIBE and answers UNSUBACK [MQTT-3.10.4-4], in 5.0 with a
// code per filter [MQTT-3.11.3-1].
func (b *Broker) onUnsubscribe(bt *batch, cl *client, p *packet.Unsubscribe) {
	s := cl.s
	ack := &bt.unsuback
	ack.PacketID = p.PacketID
	ack.Codes = ack.Codes[:0]
	ack.Props.Reset()
	for _, f := range p.Filters {
		removed := b.indexUnsubscribe(f, pubsub.SubscriberID(s.ID()))
		s.RemoveSub(f)
		code := packet.Success
		if removed {
			b.stats.subscriptions(-1)
		} else {
			code = packet.NoSubscriptionExisted
		}
		ack.Codes = append(ack.Codes, code)
	}
	bt.mark(s, s.Send(ack))
}
