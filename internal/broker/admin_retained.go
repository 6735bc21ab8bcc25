package broker

import (
	"time"
	"unicode/utf8"

	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// RetainedInfo is a retained message as the admin API shows it: the payload as text when
// it is UTF-8, else in PayloadBase64's bytes.
type RetainedInfo struct {
	Topic     string    `json:"topic"`
	Payload   *string   `json:"payload,omitempty"`
	Bytes     []byte    `json:"payload_base64,omitempty"`
	Size      int       `json:"size"`
	QoS       uint8     `json:"qos"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

func retainedInfo(topic string, m *session.Message, payload bool) RetainedInfo {
	in := RetainedInfo{Topic: topic, Size: len(m.Payload()), QoS: m.QoS}
	if m.Expiry != 0 {
		in.ExpiresAt = time.Unix(0, m.Expiry).UTC()
	}
	if payload {
		if p := m.Payload(); utf8.Valid(p) {
			s := string(p)
			in.Payload = &s
		} else {
			in.Bytes = append([]byte(nil), p...)
		}
	}
	return in
}

// Retained lists the retained messages filter matches, without payloads, skipping the
// first offset: up to limit, and whether there are more. The walk is the topic tree's,
// under its read lock, which a retained publish waits for: limit bounds it.
func (b *Broker) Retained(filter string, offset, limit int) (out []RetainedInfo, more bool) {
	i := 0
	b.retained.tree.Match([]byte(filter), func(topic string, m *session.Message) bool {
		if i++; i <= offset {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, retainedInfo(topic, m, false))
		return true
	})
	return out, more
}

// RetainedMessage returns topic's retained message, payload included.
func (b *Broker) RetainedMessage(topic string) (RetainedInfo, bool) {
	m, ok := b.retained.tree.Get([]byte(topic))
	if !ok || m == nil {
		return RetainedInfo{}, false
	}
	return retainedInfo(topic, m, true), true
}

// A SubscriberInfo is a subscription that a topic's messages reach.
type SubscriberInfo struct {
	ClientID string `json:"client_id,omitempty"`
	QoS      uint8  `json:"qos"`
	Group    string `json:"shared_group,omitempty"` // a $share group: one member gets each message
}

// Subscribers lists who a message on topic would reach on this node: each subscription's
// session, and each shared group once; up to limit.
func (b *Broker) Subscribers(topic string, limit int) []SubscriberInfo {
	var m pubsub.Matches
	b.index.Match([]byte(topic), &m)
	var out []SubscriberInfo
	b.ids.mu.RLock()
	for _, s := range m.Subs {
		if len(out) == limit {
			break
		}
		if t := b.lookup(s.Subscriber); t.s != nil {
			out = append(out, SubscriberInfo{ClientID: t.s.ClientID(), QoS: s.QoS})
		}
	}
	b.ids.mu.RUnlock()
	for _, g := range m.Groups {
		if len(out) == limit {
			break
		}
		out = append(out, SubscriberInfo{Group: b.index.GroupName(g)})
	}
	return out
}
