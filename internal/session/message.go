package session

import (
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A Message is an application message as the broker holds it: immutable, and shared by
// every recipient, queue and retained slot that holds it. Per-recipient state (QoS, packet
// id, retain flag, subscription ids, alias) lives in the recipient's queue entry.
//
// A message is either owned or borrowed. An owned message has its topic, payload and
// encoded pass-through properties copied into one buffer of its own (two allocations in
// all). A borrowed message points into the read buffer of the PUBLISH being handled and is
// valid only while that PUBLISH is: the publish path starts with a borrowed message and
// calls Own the first time a recipient must keep it (a QoS 1/2 window or queue, the
// retained store, a will). A QoS 0 message that every recipient takes at once is therefore
// never copied at all.
type Message struct {
	topic   []byte
	payload []byte
	props   []byte // encoded pass-through properties (packet.Publish.RawProps)
	Expiry  int64  // when the message expires, Unix nanoseconds; 0: never (v5 3.3.2.3.3)
	// sid is the message's id in the store while a persistent queue entry or a retained
	// topic refers to it, 0 otherwise; guarded by the Journal's lock (journal.go).
	sid      uint64
	Origin   uint32 // ID of the publishing session, for No Local; 0 for the broker itself
	QoS      uint8  // the QoS it was published with
	Retain   bool   // the publisher's retain flag
	borrowed bool
	pool     poolRefs // a pooled message's bytes and holders (msgpool.go)
}

// NewMessage copies a PUBLISH into an owned message. topic is the resolved topic name (the
// packet's may be empty behind a topic alias). Message expiry becomes a deadline from now.
func NewMessage(p *packet.Publish, topic []byte, origin uint32, now time.Time) *Message {
	var m Message
	m.Borrow(p, topic, origin, now, nil)
	return m.Own()
}

// NewLocalMessage builds an owned message the broker itself publishes ($SYS, wills,
// in-process Publish).
func NewLocalMessage(topic string, payload []byte, qos uint8, retain bool) *Message {
	p := packet.Publish{Topic: []byte(topic), Payload: payload, QoS: qos, Retain: retain}
	return NewMessage(&p, p.Topic, 0, time.Time{})
}

// Borrow sets m to a borrowed view of p: topic and payload stay in p's buffer, the
// pass-through properties are encoded into scratch, which Borrow returns (grown) for reuse.
func (m *Message) Borrow(p *packet.Publish, topic []byte, origin uint32, now time.Time, scratch []byte) []byte {
	pass := passThrough(&p.Props)
	props := pass.AppendRaw(scratch[:0], packet.PUBLISH)
	*m = Message{topic: topic, payload: p.Payload, props: props, Origin: origin, QoS: p.QoS,
		Retain: p.Retain, borrowed: true}
	if p.Props.MessageExpiry.Set {
		m.Expiry = now.Add(time.Duration(p.Props.MessageExpiry.V) * time.Second).UnixNano()
	}
	return props
}

// Own returns m itself if it is owned, or an owned copy of a borrowed m.
func (m *Message) Own() *Message {
	if !m.borrowed {
		return m
	}
	tl, pl := len(m.topic), len(m.payload)
	data := make([]byte, 0, tl+pl+len(m.props))
	data = append(append(append(data, m.topic...), m.payload...), m.props...)
	// A borrowed message is never stored (no sid) nor pooled.
	return &Message{topic: data[:tl:tl], payload: data[tl : tl+pl : tl+pl], props: data[tl+pl:],
		Expiry: m.Expiry, Origin: m.Origin, QoS: m.QoS, Retain: m.Retain}
}

// Borrowed reports whether m points into a buffer it does not own.
func (m *Message) Borrowed() bool { return m.borrowed }

// Topic returns the topic name. The caller must not modify it.
func (m *Message) Topic() []byte { return m.topic }

// Payload returns the payload. The caller must not modify it.
func (m *Message) Payload() []byte { return m.payload }

// Props returns the encoded pass-through properties.
func (m *Message) Props() []byte { return m.props }

// Size approximates the memory the message holds, for queue byte limits.
func (m *Message) Size() int { return len(m.topic) + len(m.payload) + len(m.props) + 96 }

// WithRetain returns an owned copy of m, sharing its buffer, with the retain flag set to r.
func (m *Message) WithRetain(r bool) *Message {
	o := m.Own()
	o.pin() // its holder does not count, and the copy shares its bytes
	if o.Retain == r {
		return o
	}
	c := o.share()
	c.Retain = r
	return c
}

// share returns a new message sharing m's bytes, with no store id and not pooled. m must
// be owned, and pinned if pooled.
func (m *Message) share() *Message {
	return &Message{topic: m.topic, payload: m.payload, props: m.props, Expiry: m.Expiry,
		Origin: m.Origin, QoS: m.QoS, Retain: m.Retain, borrowed: m.borrowed}
}

// Remaining reports the message expiry interval left at now (Unix nanoseconds) in whole
// seconds, rounded up; has is false for a message without expiry, alive false once it
// has expired.
func (m *Message) Remaining(now int64) (secs uint32, has, alive bool) {
	if m.Expiry == 0 {
		return 0, false, true
	}
	left := m.Expiry - now
	if left <= 0 {
		return 0, true, false
	}
	return uint32((left + int64(time.Second) - 1) / int64(time.Second)), true, true
}

// passThrough selects the properties a broker forwards unchanged: payload format
// [MQTT-3.3.2-4], response topic [MQTT-3.3.2-15], correlation data [MQTT-3.3.2-16], user
// properties [MQTT-3.3.2-17] and content type [MQTT-3.3.2-20]; topic alias, message expiry
// and subscription identifiers are per recipient.
func passThrough(p *packet.Properties) packet.Properties {
	return packet.Properties{
		PayloadFormat:   p.PayloadFormat,
		ContentType:     p.ContentType,
		ResponseTopic:   p.ResponseTopic,
		CorrelationData: p.CorrelationData,
		User:            p.User,
	}
}
