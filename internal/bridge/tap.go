package bridge

import (
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// onLocal is the tap's function: a local message for an out topic is copied into the
// queue under its remote name, and reports whether its entry was staged into the store
// (store.go): the publisher's acknowledgement then waits for it. It runs on the
// publisher's goroutine and never blocks; a full queue drops a message (queue.push) and
// counts it.
func (br *Bridge) onLocal(m *session.Message, qos uint8, retain bool) bool {
	topic, ok := toRemote(br.routes, string(m.Topic()))
	if !ok {
		return false // matched by a filter of another route's prefix only; not this bridge's
	}
	r := br.q.push(newMsg(topic, m.Payload(), m.Props(), m.Expiry, qos, retain))
	if r.drop0 > 0 {
		br.dropped0.Add(uint64(r.drop0))
	}
	if r.drop1 > 0 {
		br.dropped.Add(uint64(r.drop1))
	}
	if !r.kept {
		return false
	}
	select {
	case br.wake <- struct{}{}:
	default:
	}
	return r.stored
}

// onRemote publishes a message from the remote locally, under its local name, with the
// tap as publisher: the tap's No Local subscriptions keep it from going back out. It
// reports whether the store keeps it: its acknowledgement to the remote must then wait
// (inbound.go). What it staged is committed by the caller.
func (br *Bridge) onRemote(p *packet.Publish) (durable bool) {
	topic, ok := toLocal(br.routes, string(p.Topic))
	if !ok {
		br.log.Debug("bridge: remote message on a topic no in route maps", "topic", string(p.Topic))
		return false
	}
	p.Topic = []byte(topic)
	p.Props.TopicAlias = packet.Opt[uint16]{}
	p.Props.SubscriptionIDs = p.Props.SubscriptionIDs[:0]
	_, durable, err := br.tap.PublishStaged(p)
	if err != nil {
		br.log.Warn("bridge: remote message not published locally", "topic", topic, "err", err)
		return false
	}
	br.in.Add(1)
	return durable
}
