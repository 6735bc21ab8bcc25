package hostile

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// badStrings are the byte sequences a UTF-8 Encoded String must not hold, each with the
// rule it breaks in 5.0 and in 3.1.1. The code points the spec says SHOULD NOT appear (the
// controls) are a receiver's choice to refuse (1.5.4 in 5.0, 1.5.3 in 3.1.1); bifrost
// refuses them (packet.ValidUTF8), so they are answered as the others.
var badStrings = []struct {
	name, s        string
	rule5, rule311 string
}{
	{"ill-formed", "a\xffb", "MQTT-1.5.4-1", "MQTT-1.5.3-1"},
	{"truncated", "ab\xc3", "MQTT-1.5.4-1", "MQTT-1.5.3-1"},
	{"overlong-nul", "a\xc0\x80b", "MQTT-1.5.4-1", "MQTT-1.5.3-1"},
	{"surrogate", "a\xed\xa0\x80b", "MQTT-1.5.4-1", "MQTT-1.5.3-1"},
	{"nul", "a\x00b", "MQTT-1.5.4-2", "MQTT-1.5.3-2"},
	{"control", "a\x01b", "spec 1.5.4: MAY be treated as malformed", "spec 1.5.3: MAY close"},
}

// goodString is valid UTF-8 beyond ASCII: each field's packet built with it is accepted,
// which shows that the refusals come from the bad string and from nothing else.
const goodString = "utf8/\u00e9\u4e2d\U0001F600"

// A stringField is a UTF-8 Encoded String a client sends: in which packet (in builds that
// packet around s, for client id, where the packet is a CONNECT), which rule makes it one,
// and what accepts the packet when s is valid.
type stringField struct {
	name           string
	rule5, rule311 string
	only           packet.Version // 0: in 3.1.1 and 5.0
	when           stage          // atConnect or afterConnect
	in             func(v packet.Version, id, s string) []byte
	ack            packet.Type // afterConnect: the answer to the packet with a valid s
}

// willWith returns a CONNECT change that adds a will, changed by more.
func willWith(more func(c *packet.Connect)) func(*packet.Connect) {
	return func(c *packet.Connect) {
		c.WillFlag, c.WillTopic, c.WillPayload = true, []byte("utf8/will"), []byte("x")
		if more != nil {
			more(c)
		}
	}
}

var stringFields = []stringField{
	{name: "client-id", rule5: "MQTT-3.1.3-4", rule311: "MQTT-3.1.3-4", when: atConnect,
		in: func(v packet.Version, id, s string) []byte { return connectBytes(v, id+"/"+s, nil) }},
	{name: "user-name", rule5: "MQTT-3.1.3-12", rule311: "MQTT-3.1.3-11", when: atConnect,
		in: func(v packet.Version, id, s string) []byte {
			return connectBytes(v, id, func(c *packet.Connect) { c.UsernameFlag, c.Username = true, []byte(s) })
		}},
	{name: "will-topic", rule5: "MQTT-3.1.3-11", rule311: "MQTT-3.1.3-10", when: atConnect,
		in: func(v packet.Version, id, s string) []byte {
			return connectBytes(v, id, willWith(func(c *packet.Connect) { c.WillTopic = []byte(s) }))
		}},
	{name: "will-content-type", rule5: "spec 3.1.3.2.5: a UTF-8 Encoded String", only: packet.V5, when: atConnect,
		in: func(v packet.Version, id, s string) []byte {
			return connectBytes(v, id, willWith(func(c *packet.Connect) { c.WillProps.ContentType = []byte(s) }))
		}},
	{name: "will-response-topic", rule5: "spec 3.1.3.2.6: a UTF-8 Encoded String", only: packet.V5, when: atConnect,
		in: func(v packet.Version, id, s string) []byte {
			return connectBytes(v, id, willWith(func(c *packet.Connect) { c.WillProps.ResponseTopic = []byte(s) }))
		}},
	{name: "topic", rule5: "MQTT-3.3.2-1", rule311: "MQTT-3.3.2-1", when: afterConnect, ack: packet.PUBACK,
		in: func(v packet.Version, _, s string) []byte { return publishRaw(v, 0x32, s, 1, nil) }},
	{name: "response-topic", rule5: "MQTT-3.3.2-13", only: packet.V5, when: afterConnect, ack: packet.PUBACK,
		in: func(v packet.Version, _, s string) []byte {
			return publishRaw(v, 0x32, "utf8/t", 1, cat([]byte{0x08}, str(s)))
		}},
	{name: "content-type", rule5: "MQTT-3.3.2-19", only: packet.V5, when: afterConnect, ack: packet.PUBACK,
		in: func(v packet.Version, _, s string) []byte {
			return publishRaw(v, 0x32, "utf8/t", 1, cat([]byte{0x03}, str(s)))
		}},
	{name: "subscribe-filter", rule5: "MQTT-3.8.3-1", rule311: "MQTT-3.8.3-1", when: afterConnect, ack: packet.SUBACK,
		in: func(v packet.Version, _, s string) []byte { return subscribeRaw(v, 0x82, s, 1) }},
	{name: "unsubscribe-filter", rule5: "MQTT-3.10.3-1", rule311: "MQTT-3.10.3-1", when: afterConnect, ack: packet.UNSUBACK,
		in: func(v packet.Version, _, s string) []byte {
			b := []byte{0, 1}
			if v == packet.V5 {
				b = append(b, 0)
			}
			return fixed(0xa2, cat(b, str(s)))
		}},
}

// TestUTF8Strings sends every UTF-8 Encoded String field of every packet a client sends
// with each sequence the spec forbids, on a connection of its own, in 3.1.1 and 5.0, and
// checks the exact answer: an ill-formed string makes the packet malformed (5.0 spec
// 1.5.4), and a malformed packet closes the connection. In 5.0 a bad CONNECT is first
// answered with CONNACK 0x81 (spec 3.1.4 and 4.13.1 allow it), any other packet with
// DISCONNECT 0x81 (4.13.1: SHOULD) [MQTT-4.13.1-1]. In 3.1.1 the connection is closed
// without a word: a CONNECT that does not conform gets no CONNACK [MQTT-3.1.4-1], and the
// server has no DISCONNECT [MQTT-1.5.3-1], [MQTT-1.5.3-2]. The same field with a valid
// string is accepted.
func TestUTF8Strings(t *testing.T) {
	e := start(t, nil)
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		for _, f := range stringFields {
			if f.only != 0 && f.only != v {
				continue
			}
			rule := f.rule5
			if v != packet.V5 {
				rule = f.rule311
			}
			t.Run(fmt.Sprintf("%v/%s/valid", v, f.name), func(t *testing.T) {
				t.Parallel()
				f.accepted(t, e, v)
			})
			for _, bad := range badStrings {
				t.Run(fmt.Sprintf("%v/%s/%s", v, f.name, bad.name), func(t *testing.T) {
					t.Parallel()
					defer func() {
						if t.Failed() {
							which := bad.rule5
							if v != packet.V5 {
								which = bad.rule311
							}
							t.Logf("rules %s, %s", rule, which)
						}
					}()
					f.refused(t, e, v, fmt.Sprintf("utf8-%v-%s-%s", v, f.name, bad.name), bad.s)
				})
			}
		}
	}
}

// refused sends the field with s on a new connection of client id and checks the answer
// to a malformed packet.
func (f stringField) refused(t *testing.T, e *env, v packet.Version, id, s string) {
	r := e.dial(t, v)
	if f.when == afterConnect {
		r.connect(id, nil)
	}
	if err := r.write(f.in(v, id, s)); err != nil {
		t.Fatalf("write: %v", err)
	}
	switch {
	case v != packet.V5:
		r.closed()
	case f.when == atConnect:
		r.refused(false, packet.MalformedPacket)
	default:
		r.ended(packet.MalformedPacket)
	}
}

// accepted sends the field with a valid string and checks that the broker takes it.
func (f stringField) accepted(t *testing.T, e *env, v packet.Version) {
	r := e.dial(t, v)
	id := fmt.Sprintf("utf8-%v-%s-valid", v, f.name)
	if f.when == atConnect {
		if err := r.write(f.in(v, id, goodString)); err != nil {
			t.Fatalf("write: %v", err)
		}
		if ack := expect[*packet.Connack](r); ack.Code != packet.Success {
			t.Fatalf("CONNACK %#x (%v), want success", byte(ack.Code), ack.Code)
		}
		return
	}
	r.connect(id, nil)
	if err := r.write(f.in(v, id, goodString)); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := r.alive()
	if len(got) != 1 || got[0].Type() != f.ack {
		t.Fatalf("got %v before the PINGRESP, want one %v", got, f.ack)
	}
}
