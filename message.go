package bifrost

import (
	"bytes"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// A Message is one message as Subscribe's callback receives it.
//
// Ownership: the callback may keep Topic (a string of its own) and what Properties
// returns (copied out). Payload points into the broker's buffers, often the publisher's
// read buffer, and is valid only until the callback returns; so is m for a later call of
// Properties. A callback that keeps the payload copies it (bytes.Clone); one that keeps
// the message keeps its Clone.
type Message struct {
	Topic   string
	Payload []byte
	// QoS is this delivery's: the publisher's, at most the broker's mqtt.max_qos.
	QoS byte
	// Retain is the publisher's retain flag, as MQTT 5's Retain As Published keeps it.
	Retain bool

	props  []byte // the encoded pass-through properties (session.Message.Props); valid as Payload is
	expiry int64  // when the message expires, Unix nanoseconds; 0: never
}

// Properties are the MQTT 5 properties a subscriber sees of a message: those its
// publisher set that the broker passes on unchanged [MQTT-3.3.2-4, -15, -16, -17, -20],
// and when it expires. A message from an MQTT 3.1.1 client or from Publish has none.
type Properties struct {
	// PayloadFormat is the Payload Format Indicator: 1, the payload is UTF-8 text; 0
	// (or absent), unspecified bytes.
	PayloadFormat byte
	// ContentType describes the payload, often a MIME type; "": none.
	ContentType string
	// ResponseTopic is where the publisher wants a response (request/response); "": none.
	ResponseTopic string
	// CorrelationData lets the publisher match the response to its request; nil: none.
	CorrelationData []byte
	// User are the user properties in the publisher's order; a key may repeat.
	User []UserProperty
	// Expiry is when the message expires: its Message Expiry Interval counted from its
	// publication; zero: never.
	Expiry time.Time
}

// A UserProperty is one key and value of a message's user properties.
type UserProperty struct {
	Key, Value string
}

// Properties returns m's MQTT 5 properties, copied out of the broker's buffers: the
// caller may keep them. It allocates what it copies; a callback that does not call it
// pays nothing for them. Like Payload, it is valid only during the callback, unless m is
// a Clone.
func (m Message) Properties() Properties {
	var out Properties
	if m.expiry != 0 {
		out.Expiry = time.Unix(0, m.expiry)
	}
	if len(m.props) == 0 {
		return out
	}
	var p packet.Properties
	// The broker encoded them from a PUBLISH it had checked: they decode.
	if err := p.DecodeRaw(m.props, packet.PUBLISH); err != nil {
		return out
	}
	out.PayloadFormat = p.PayloadFormat.V
	out.ContentType = string(p.ContentType)
	out.ResponseTopic = string(p.ResponseTopic)
	out.CorrelationData = bytes.Clone(p.CorrelationData)
	if len(p.User) > 0 {
		out.User = make([]UserProperty, len(p.User))
		for i, u := range p.User {
			out.User[i] = UserProperty{Key: string(u.Key), Value: string(u.Value)}
		}
	}
	return out
}

// Clone returns a copy of m that owns its bytes, for a callback that keeps the message
// past its return.
func (m Message) Clone() Message {
	m.Payload = bytes.Clone(m.Payload)
	m.props = bytes.Clone(m.props)
	return m
}

// message is m as Subscribe's callback receives it: qos and retain are this delivery's.
// Only the topic is copied (one allocation); the rest points into m.
func message(m *session.Message, qos uint8, retain bool) Message {
	return Message{Topic: string(m.Topic()), Payload: m.Payload(), QoS: qos, Retain: retain,
		props: m.Props(), expiry: m.Expiry}
}
