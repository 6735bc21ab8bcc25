package hostile

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A violation is one malformed or out-of-order input and the answer the specification
// prescribes for it.
type violation struct {
	name string
	rule string         // the spec rule broken (its id, or the section), for the failure message
	only packet.Version // run in this version only; 0: in 3.1.1 and 5.0
	when stage          // where in the connection the input comes
	in   func(v packet.Version) []byte
	// want: the reason codes a 5.0 client may be told. For afterConnect a DISCONNECT
	// carries one of them; for atConnect a CONNACK (3.1.1: the return code mapped to
	// them), unless mayClose lets the server close without a word.
	want     []packet.ReasonCode
	mayClose bool
}

// stage is where an input comes in a connection.
type stage uint8

const (
	beforeConnect stage = iota // as the first bytes: nothing may be answered [MQTT-3.1.0-1]
	atConnect                  // as the CONNECT: a refusing CONNACK, or the close
	afterConnect               // after a successful CONNECT: DISCONNECT (5.0), close
)

var (
	malformedOnly = []packet.ReasonCode{packet.MalformedPacket}
	protocolOnly  = []packet.ReasonCode{packet.ProtocolError}
	eitherError   = []packet.ReasonCode{packet.MalformedPacket, packet.ProtocolError}
)

// connectBytes is a valid CONNECT of client id in version v, changed by more.
func connectBytes(v packet.Version, id string, more func(*packet.Connect)) []byte {
	c := &packet.Connect{Version: v, ClientID: []byte(id), CleanStart: true, KeepAlive: 60}
	if more != nil {
		more(c)
	}
	return c.AppendTo(nil, v)
}

// connectFlagsAt is the offset of the connect flags byte in connectBytes' output (one
// byte of remaining length, "MQTT", the level).
const connectFlagsAt = 2 + 6 + 1

// withFlags returns a valid CONNECT whose connect flags byte is changed by f.
func withFlags(v packet.Version, more func(*packet.Connect), f func(byte) byte) []byte {
	b := connectBytes(v, "flags", more)
	b[connectFlagsAt] = f(b[connectFlagsAt])
	return b
}

// publishBody is a PUBLISH variable header and payload: topic, packet id (QoS > 0), the
// 5.0 property section with content props, payload.
func publishBody(v packet.Version, topic []byte, pid uint16, props []byte, payload string) []byte {
	b := cat(str(string(topic)), pidBytes(pid))
	if v == packet.V5 {
		b = cat(b, fixed(0, props)[1:]) // the length, a variable byte integer, and props
	}
	return append(b, payload...)
}

func pidBytes(pid uint16) []byte {
	if pid == 0 {
		return nil
	}
	return []byte{byte(pid >> 8), byte(pid)}
}

// publishRaw is a whole PUBLISH with first byte first and payload "x".
func publishRaw(v packet.Version, first byte, topic string, pid uint16, props []byte) []byte {
	return fixed(first, publishBody(v, []byte(topic), pid, props, "x"))
}

// subscribeRaw is a SUBSCRIBE with first byte first, packet id 1 and one filter.
func subscribeRaw(v packet.Version, first byte, filter string, opts byte) []byte {
	b := []byte{0, 1}
	if v == packet.V5 {
		b = append(b, 0)
	}
	return fixed(first, cat(b, str(filter), []byte{opts}))
}

var violations = []violation{
	// Before CONNECT the server knows no version and may send nothing: it closes.
	{name: "publish-first", rule: "MQTT-3.1.0-1", when: beforeConnect,
		in: func(v packet.Version) []byte { return fixed(0x30, cat(str("t"), []byte("x"))) }},
	{name: "subscribe-first", rule: "MQTT-3.1.0-1", when: beforeConnect,
		in: func(v packet.Version) []byte { return fixed(0x82, cat([]byte{0, 1}, str("#"), []byte{0})) }},
	{name: "pingreq-first", rule: "MQTT-3.1.0-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte{0xc0, 0} }},
	{name: "disconnect-first", rule: "MQTT-3.1.0-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte{0xe0, 0} }},
	{name: "connack-first", rule: "MQTT-3.1.0-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte{0x20, 2, 0, 0} }},
	{name: "http-request", rule: "MQTT-2.1.3-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte("GET / HTTP/1.1\r\nHost: bifrost\r\n\r\n") }},
	{name: "tls-client-hello", rule: "MQTT-2.1.3-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x03} }},
	{name: "reserved-type-0", rule: "MQTT-2.1.3-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte{0x00, 0x00} }},
	{name: "connect-fixed-header-flags", rule: "MQTT-2.1.3-1", when: beforeConnect,
		in: func(packet.Version) []byte {
			b := connectBytes(packet.V311, "x", nil)
			b[0] |= 0x01
			return b
		}},
	{name: "remaining-length-5-bytes", rule: "MQTT-1.5.5-1", when: beforeConnect,
		in: func(packet.Version) []byte { return []byte{0x10, 0xff, 0xff, 0xff, 0xff, 0x7f} }},

	// Malformed CONNECTs: the server closes, and may first tell a 5.0 client why
	// (spec 3.1.4, 4.13). An unsupported protocol level must be answered [MQTT-3.1.2-2].
	{name: "protocol-level-9", rule: "MQTT-3.1.2-2", only: packet.V311, when: atConnect,
		in: func(packet.Version) []byte {
			b := connectBytes(packet.V311, "lvl", nil)
			b[connectFlagsAt-1] = 9
			return b
		}, want: []packet.ReasonCode{packet.UnsupportedProtocolVersion}},
	{name: "protocol-name", rule: "MQTT-3.1.2-1", when: atConnect,
		in: func(v packet.Version) []byte {
			b := connectBytes(v, "name", nil)
			b[2+2+3] = 'X' // MQTX
			return b
		}, want: []packet.ReasonCode{packet.UnsupportedProtocolVersion}, mayClose: true},
	{name: "connect-reserved-flag", rule: "MQTT-3.1.2-3", when: atConnect,
		in: func(v packet.Version) []byte {
			return withFlags(v, nil, func(f byte) byte { return f | 0x01 })
		}, want: malformedOnly, mayClose: true},
	{name: "will-qos-3", rule: "MQTT-3.1.2-12", when: atConnect,
		in: func(v packet.Version) []byte {
			return withFlags(v, func(c *packet.Connect) {
				c.WillFlag, c.WillTopic, c.WillPayload = true, []byte("will"), []byte("x")
			}, func(f byte) byte { return f | 0x18 })
		}, want: malformedOnly, mayClose: true},
	{name: "will-retain-without-will", rule: "MQTT-3.1.2-15", when: atConnect,
		in: func(v packet.Version) []byte {
			return withFlags(v, nil, func(f byte) byte { return f | 0x20 })
		}, want: malformedOnly, mayClose: true},
	{name: "password-without-username", rule: "MQTT-3.1.2-22", only: packet.V311, when: atConnect,
		in: func(v packet.Version) []byte {
			return connectBytes(v, "pw", func(c *packet.Connect) { c.PasswordFlag, c.Password = true, []byte("secret") })
		}, want: malformedOnly, mayClose: true},
	{name: "client-id-ill-formed-utf8", rule: "MQTT-1.5.4-1", when: atConnect,
		in:   func(v packet.Version) []byte { return connectBytes(v, "bad\xff\xfe", nil) },
		want: []packet.ReasonCode{packet.MalformedPacket, packet.ClientIdentifierNotValid}, mayClose: true},
	{name: "client-id-surrogate", rule: "MQTT-1.5.4-1", when: atConnect,
		in:   func(v packet.Version) []byte { return connectBytes(v, "bad\xed\xa0\x80", nil) },
		want: []packet.ReasonCode{packet.MalformedPacket, packet.ClientIdentifierNotValid}, mayClose: true},
	{name: "client-id-nul", rule: "MQTT-1.5.4-2", when: atConnect,
		in:   func(v packet.Version) []byte { return connectBytes(v, "bad\x00id", nil) },
		want: []packet.ReasonCode{packet.MalformedPacket, packet.ClientIdentifierNotValid}, mayClose: true},
	{name: "will-topic-wildcard", rule: "MQTT-3.1.3-11", when: atConnect,
		in: func(v packet.Version) []byte {
			return connectBytes(v, "will", func(c *packet.Connect) {
				c.WillFlag, c.WillTopic, c.WillPayload = true, []byte("a/#"), []byte("x")
			})
		}, want: []packet.ReasonCode{packet.MalformedPacket, packet.TopicNameInvalid}, mayClose: true},
	{name: "connect-trailing-bytes", rule: "spec 4.13: bytes beyond the CONNECT's fields", when: atConnect,
		in: func(v packet.Version) []byte {
			b := connectBytes(v, "trail", nil)
			return fixed(0x10, append(b[2:], 0, 0))
		}, want: malformedOnly, mayClose: true},
	{name: "connect-truncated-field", rule: "spec 4.13: a field longer than the packet", when: atConnect,
		in: func(v packet.Version) []byte {
			b := connectBytes(v, "truncated-client-id", nil)
			return fixed(0x10, b[2:len(b)-5]) // the client id's length promises 5 bytes more
		}, want: malformedOnly, mayClose: true},
	{name: "empty-client-id-persistent", rule: "MQTT-3.1.3-8", only: packet.V311, when: atConnect,
		in: func(v packet.Version) []byte {
			return connectBytes(v, "", func(c *packet.Connect) { c.CleanStart = false })
		}, want: []packet.ReasonCode{packet.ClientIdentifierNotValid}},
	{name: "receive-maximum-0", rule: "spec 3.1.2.11.3: Receive Maximum 0", only: packet.V5, when: atConnect,
		in: func(v packet.Version) []byte {
			b := connectBytes(v, "rm0", func(c *packet.Connect) { c.Props.ReceiveMaximum = packet.Some[uint16](1) })
			b[len(b)-len("rm0")-2-1] = 0 // the property's low byte
			return b
		}, want: eitherError, mayClose: true},
	{name: "auth-method-unsupported", rule: "MQTT-4.12.0-1", only: packet.V5, when: atConnect,
		in: func(v packet.Version) []byte {
			return connectBytes(v, "scram", func(c *packet.Connect) { c.Props.AuthMethod = []byte("SCRAM-SHA-1024") })
		}, want: []packet.ReasonCode{packet.BadAuthenticationMethod, packet.NotAuthorized}, mayClose: true},

	// After CONNECT: a 5.0 client gets a DISCONNECT with the reason code, everyone the close.
	{name: "second-connect", rule: "MQTT-3.1.0-2", when: afterConnect,
		in: func(v packet.Version) []byte { return connectBytes(v, "again", nil) }, want: protocolOnly},
	{name: "remaining-length-5-bytes", rule: "MQTT-1.5.5-1", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x7f} }, want: malformedOnly},
	{name: "publish-qos-3", rule: "MQTT-3.3.1-4", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x36, "t", 1, nil) }, want: malformedOnly},
	{name: "publish-qos0-dup", rule: "MQTT-3.3.1-2", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x38, "t", 0, nil) }, want: malformedOnly},
	{name: "publish-packet-id-0", rule: "MQTT-2.2.1-3", when: afterConnect,
		in: func(v packet.Version) []byte {
			b := publishRaw(v, 0x32, "t", 1, nil)
			b[2+3+1] = 0 // packet id 1 → 0
			return b
		}, want: eitherError},
	{name: "publish-topic-plus", rule: "MQTT-3.3.2-2", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "a/+/b", 0, nil) }, want: malformedOnly},
	{name: "publish-topic-hash", rule: "MQTT-3.3.2-2", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x32, "a/#", 1, nil) }, want: malformedOnly},
	{name: "publish-topic-overlong-nul", rule: "MQTT-1.5.4-1", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "a/\xc0\x80", 0, nil) }, want: malformedOnly},
	{name: "publish-topic-surrogate", rule: "MQTT-1.5.4-1", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "a/\xed\xb0\x80", 0, nil) }, want: malformedOnly},
	{name: "publish-topic-invalid-byte", rule: "MQTT-1.5.4-1", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "a/\xff", 0, nil) }, want: malformedOnly},
	{name: "publish-topic-nul", rule: "MQTT-1.5.4-2", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "a\x00b", 0, nil) }, want: malformedOnly},
	{name: "publish-topic-empty", rule: "MQTT-4.7.3-1", when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "", 0, nil) }, want: eitherError},
	{name: "publish-truncated-topic", rule: "spec 4.13: a field longer than the packet", when: afterConnect,
		in: func(packet.Version) []byte { return fixed(0x30, []byte{0, 100, 'a', 'b'}) }, want: malformedOnly},
	{name: "publish-property-length-past-end", rule: "MQTT-2.2.2-1", only: packet.V5, when: afterConnect,
		in: func(packet.Version) []byte { return fixed(0x30, cat(str("t"), []byte{10, 0x01, 0})) }, want: malformedOnly},
	{name: "publish-unknown-property", rule: "MQTT-2.2.2-2", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, []byte{0x7f, 0}) }, want: malformedOnly},
	{name: "publish-property-not-allowed", rule: "MQTT-2.2.2-2", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, []byte{0x11, 0, 0, 0, 1}) }, want: malformedOnly},
	{name: "publish-duplicate-property", rule: "MQTT-2.2.2-2", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, []byte{0x01, 0, 0x01, 0}) }, want: protocolOnly},
	{name: "publish-subscription-identifier", rule: "MQTT-3.3.4-6", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, []byte{0x0b, 1}) }, want: protocolOnly},
	{name: "publish-response-topic-wildcard", rule: "MQTT-3.3.2-14", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, cat([]byte{0x08}, str("r/#"))) }, want: eitherError},
	{name: "publish-topic-alias-0", rule: "MQTT-3.3.2-8", only: packet.V5, when: afterConnect,
		in:   func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, []byte{0x23, 0, 0}) },
		want: []packet.ReasonCode{packet.TopicAliasInvalid}}, // spec 3.3.4: 0 as above the maximum
	{name: "publish-topic-alias-above-maximum", rule: "MQTT-3.3.2-9", only: packet.V5, when: afterConnect,
		in:   func(v packet.Version) []byte { return publishRaw(v, 0x30, "t", 0, []byte{0x23, 0, aliasMax + 1}) },
		want: []packet.ReasonCode{packet.TopicAliasInvalid}},
	{name: "publish-topic-alias-unknown", rule: "spec 3.3.2.3.4: an alias not set on this connection", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return publishRaw(v, 0x30, "", 0, []byte{0x23, 0, 1}) }, want: protocolOnly},
	{name: "subscribe-flags-0", rule: "MQTT-3.8.1-1", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x80, "t", 0) }, want: malformedOnly},
	{name: "subscribe-no-filter", rule: "MQTT-3.8.3-3", when: afterConnect,
		in: func(v packet.Version) []byte {
			if v == packet.V5 {
				return []byte{0x82, 3, 0, 1, 0}
			}
			return []byte{0x82, 2, 0, 1}
		}, want: protocolOnly},
	{name: "subscribe-filter-hash-not-last", rule: "MQTT-4.7.1-2", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "a/#/b", 0) }, want: malformedOnly},
	{name: "subscribe-filter-plus-in-level", rule: "MQTT-4.7.1-3", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "a/b+", 0) }, want: malformedOnly},
	{name: "subscribe-filter-ill-formed-utf8", rule: "MQTT-1.5.4-1", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "a/\xc3", 0) }, want: malformedOnly},
	{name: "subscribe-qos-3", rule: "MQTT-3.8.3-4", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "t", 3) }, want: malformedOnly},
	{name: "subscribe-reserved-option-bits", rule: "MQTT-3.8.3-5", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "t", 0xc0) }, want: malformedOnly},
	{name: "subscribe-shared-no-local", rule: "MQTT-3.8.3-4", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "$share/g/t", 0x04) }, want: protocolOnly},
	{name: "subscribe-retain-handling-3", rule: "MQTT-3.8.3-5", only: packet.V5, when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "t", 0x30) }, want: eitherError},
	{name: "subscribe-share-name-wildcard", rule: "MQTT-4.8.2-1", when: afterConnect,
		in: func(v packet.Version) []byte { return subscribeRaw(v, 0x82, "$share/g+/t", 0) }, want: eitherError},
	{name: "unsubscribe-flags-0", rule: "MQTT-3.10.1-1", when: afterConnect,
		in: func(v packet.Version) []byte {
			b := []byte{0, 1}
			if v == packet.V5 {
				b = append(b, 0)
			}
			return fixed(0xa0, cat(b, str("t")))
		}, want: malformedOnly},
	{name: "unsubscribe-no-filter", rule: "MQTT-3.10.3-2", when: afterConnect,
		in: func(v packet.Version) []byte {
			if v == packet.V5 {
				return []byte{0xa2, 3, 0, 1, 0}
			}
			return []byte{0xa2, 2, 0, 1}
		}, want: protocolOnly},
	{name: "pubrel-flags-0", rule: "MQTT-3.6.1-1", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0x60, 2, 0, 1} }, want: malformedOnly},
	{name: "puback-flags-2", rule: "MQTT-2.1.3-1", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0x42, 2, 0, 1} }, want: malformedOnly},
	{name: "puback-truncated", rule: "spec 4.13: a field longer than the packet", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0x40, 1, 0} }, want: malformedOnly},
	{name: "pingreq-flags", rule: "MQTT-2.1.3-1", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xc1, 0} }, want: malformedOnly},
	{name: "pingreq-with-body", rule: "spec 3.12: PINGREQ has no body", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xc0, 1, 0} }, want: malformedOnly},
	{name: "disconnect-with-body", rule: "MQTT-3.14.1-1", only: packet.V311, when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xe0, 1, 0} }, want: malformedOnly},
	{name: "disconnect-invalid-reason", rule: "MQTT-3.14.2-1", only: packet.V5, when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xe0, 1, 0x03} }, want: malformedOnly},
	{name: "disconnect-expiry-after-zero", rule: "MQTT-3.14.2-2", only: packet.V5, when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xe0, 7, 0x00, 5, 0x11, 0, 0, 0, 10} }, want: protocolOnly},
	{name: "auth-before-5", rule: "MQTT-2.1.3-1", only: packet.V311, when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xf0, 0} }, want: malformedOnly},
	{name: "auth-without-method", rule: "MQTT-4.12.0-1", only: packet.V5, when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xf0, 0} }, want: protocolOnly},
	{name: "server-packet-connack", rule: "spec 2.1.2: a packet only a server sends", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0x20, 2, 0, 0} }, want: eitherError},
	{name: "server-packet-suback", rule: "spec 2.1.2: a packet only a server sends", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0x90, 3, 0, 1, 0} }, want: eitherError},
	{name: "server-packet-pingresp", rule: "spec 2.1.2: a packet only a server sends", when: afterConnect,
		in: func(packet.Version) []byte { return []byte{0xd0, 0} }, want: eitherError},
}

// TestViolations sends every violation, in 3.1.1 and 5.0, each on its own connection and
// all at once, while the healthy client runs beside them, and checks each answer.
func TestViolations(t *testing.T) {
	e := start(t, nil)
	h := e.healthy(t)
	t.Run("cases", func(t *testing.T) {
		for _, vc := range violations {
			for _, v := range []packet.Version{packet.V311, packet.V5} {
				if vc.only != 0 && vc.only != v || vc.when == beforeConnect && v == packet.V5 {
					continue // before CONNECT there is no version: once is enough
				}
				name := vc.name
				if vc.when != beforeConnect {
					name = v.String() + "/" + name
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					vc.check(t, e, v)
				})
			}
		}
	})
	h.check(t)
	if n := e.conns(t); n != 1 {
		t.Errorf("%d connections open after every attacker was answered, want the healthy one", n)
	}
}

// check sends the violation on a new connection and checks the broker's answer.
func (vc violation) check(t *testing.T, e *env, v packet.Version) {
	r := e.dial(t, v)
	if vc.when == afterConnect {
		r.connect(fmt.Sprintf("%v-%s", v, vc.name), nil)
	}
	if err := r.write(vc.in(v)); err != nil {
		t.Fatalf("write: %v", err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("rule %s", vc.rule)
		}
	}()
	switch vc.when {
	case beforeConnect:
		r.closed()
	case atConnect:
		r.refused(vc.mayClose, vc.want...)
	case afterConnect:
		r.ended(vc.want...)
	}
}
