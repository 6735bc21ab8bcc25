package interop

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// MQTT 5.0 features, and the violations the broker answers with DISCONNECT (run in 3.1.1
// too, where the connection is simply closed).
var v5Scenarios = []scenario{
	{name: "v5/topic-alias-inbound", versions: only5, run: testTopicAliasInbound},
	{name: "v5/topic-alias-outbound", versions: only5, run: testTopicAliasOutbound},
	{name: "v5/message-expiry", versions: only5, run: testMessageExpiry},
	{name: "v5/no-local", versions: only5, run: testNoLocal},
	{name: "v5/subscription-identifiers", versions: only5, run: testSubscriptionIDs},
	{name: "v5/properties-pass-through", versions: only5, run: testPropertiesPassThrough},
	{name: "v5/payload-format-any", versions: only5, run: testPayloadFormatAny},
	{name: "v5/reason-strings-absent", versions: only5, run: testNoReasonStrings},
	{name: "protocol-violations", run: testViolations},
}

// testTopicAliasInbound: a client may name a topic by an alias it set earlier on the
// connection, and remap it; subscribers get the full topic name (spec 3.3.2.3.4).
func testTopicAliasInbound(t *testing.T, e *env) {
	sub, _ := e.connect5(t, clean("sub"))
	sub.sub(t, 1, "ta/#")
	pub, _ := e.connect5(t, clean("pub"))
	for _, p := range []struct{ topic, payload string }{
		{"ta/in", "set"}, {"", "by alias"}, {"ta/other", "remap"}, {"", "by new alias"},
	} {
		pub.publish(t, &paho.Publish{Topic: p.topic, QoS: 1, Payload: []byte(p.payload),
			Properties: &paho.PublishProperties{TopicAlias: ptr[uint16](1)}})
	}
	for _, want := range []struct{ topic, payload string }{
		{"ta/in", "set"}, {"ta/in", "by alias"}, {"ta/other", "remap"}, {"ta/other", "by new alias"},
	} {
		m := sub.in.next(t)
		if m.Topic != want.topic || m.Payload != want.payload || m.AliasOnly || m.Props.TopicAlias != nil {
			t.Fatalf("got %+v, want %q on %q by name", m, want.payload, want.topic)
		}
	}
}

// testTopicAliasOutbound: to a client whose Topic Alias Maximum is above 0 the broker sends
// a topic's second message by alias only, up to that many topics; other clients, and the
// next connection, get topic names.
func testTopicAliasOutbound(t *testing.T, e *env) {
	o := clean("aliased")
	o.aliasMax = 2
	sub, _ := e.connect5(t, o)
	sub.sub(t, 1, "ta/#")
	plain, _ := e.connect5(t, clean("plain"))
	plain.sub(t, 1, "ta/#")
	pub := e.connect(t, clean("pub"))
	for _, tp := range []string{"ta/x", "ta/x", "ta/y", "ta/y", "ta/z", "ta/z", "ta/x"} {
		pub.pub(t, tp, 1, false, tp)
	}
	for i, want := range []struct {
		topic     string
		aliasOnly bool
		alias     bool
	}{
		{"ta/x", false, true}, {"ta/x", true, true}, {"ta/y", false, true}, {"ta/y", true, true},
		{"ta/z", false, false}, {"ta/z", false, false}, {"ta/x", true, true},
	} {
		m := sub.in.next(t)
		if m.Topic != want.topic || m.Payload != want.topic || m.AliasOnly != want.aliasOnly ||
			(m.Props.TopicAlias != nil) != want.alias {
			t.Fatalf("message %d: got %+v (alias %v), want %q alias only %v", i, m, m.Props.TopicAlias, want.topic, want.aliasOnly)
		}
		if a := m.Props.TopicAlias; a != nil && (*a == 0 || *a > 2) {
			t.Fatalf("alias %d beyond the client's maximum 2", *a)
		}
		if p := plain.in.next(t); p.Topic != want.topic || p.AliasOnly || p.Props.TopicAlias != nil {
			t.Fatalf("client without aliases got %+v", p)
		}
	}
	sub.disconnect(t)
	sub, _ = e.connect5(t, o)
	sub.sub(t, 1, "ta/#")
	pub.pub(t, "ta/x", 1, false, "again")
	if m := sub.in.next(t); m.Topic != "ta/x" || m.AliasOnly {
		t.Fatalf("a new connection got %+v: aliases live as long as a connection", m)
	}
}

// testMessageExpiry: a message waiting for an offline session is sent with the expiry
// interval that is left [MQTT-3.3.2-6], and not sent once expired [MQTT-3.3.2-5].
func testMessageExpiry(t *testing.T, e *env) {
	r := e.raw(t)
	r.session("offline", true, nil)
	r.subscribe(1, 1, 0, "mx/#")
	r.leave()

	pub, _ := e.connect5(t, clean("pub"))
	var acked time.Time
	for _, m := range []struct {
		topic  string
		expiry *uint32
	}{{"mx/long", ptr[uint32](10)}, {"mx/short", ptr[uint32](1)}, {"mx/none", nil}} {
		pub.publish(t, &paho.Publish{Topic: m.topic, QoS: 1, Payload: []byte(m.topic),
			Properties: &paho.PublishProperties{MessageExpiry: m.expiry}})
		if m.topic == "mx/short" {
			acked = time.Now() // the broker stamped mx/short before it acknowledged it
		}
	}
	// Expiry is the behaviour under test: time must pass for mx/short to expire (and for
	// mx/long to lose a second), and no event of the broker marks the moment.
	time.Sleep(time.Until(acked.Add(time.Second + 50*time.Millisecond)))

	r = e.raw(t)
	if ack := r.session("offline", true, nil); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	long := r.expectPublish("mx/long", "mx/long")
	if e := long.Props.MessageExpiry; !e.Set || e.V > 9 || e.V == 0 {
		t.Fatalf("mx/long sent with expiry %+v, want 1..9 seconds left", e)
	}
	none := r.expectPublish("mx/none", "mx/none")
	if none.Props.MessageExpiry.Set {
		t.Fatal("a message without expiry was sent with one")
	}
	pub.pub(t, "mx/marker", 1, false, "")
	r.expectPublish("mx/marker", "")
}

// testNoLocal: a No Local subscription does not get the client's own messages
// [MQTT-3.8.3-3]; other clients' messages, and the own ones without No Local, arrive.
func testNoLocal(t *testing.T, e *env) {
	s, _ := e.connect5(t, clean("nolocal"))
	s.subscribe(t, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "nl/t", QoS: 1, NoLocal: true}}})
	rp := s.publish(t, &paho.Publish{Topic: "nl/t", QoS: 1, Payload: []byte("own")})
	if rp.ReasonCode != byte(packet.NoMatchingSubscribers) {
		t.Fatalf("PUBACK %#x, want 0x10: no one else subscribes", rp.ReasonCode)
	}
	other := e.connect(t, clean("other"))
	other.pub(t, "nl/t", 1, false, "other")
	if m := s.in.next(t); m.Payload != "other" {
		t.Fatalf("got %+v, want only the other client's message", m)
	}

	local, _ := e.connect5(t, clean("local"))
	local.sub(t, 1, "nl/t")
	local.pub(t, "nl/t", 1, false, "mine")
	if m := local.in.next(t); m.Payload != "mine" {
		t.Fatalf("got %+v, want the own message", m)
	}
}

// testSubscriptionIDs: a message carries the identifier of the subscription it matched
// [MQTT-3.3.4-3], none for a subscription without one, and the newest after a
// subscription is replaced.
func testSubscriptionIDs(t *testing.T, e *env) {
	s, _ := e.connect5(t, clean("ids"))
	subscribe := func(filter string, id *int) {
		s.subscribe(t, &paho.Subscribe{Properties: &paho.SubscribeProperties{SubscriptionIdentifier: id},
			Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	}
	subscribe("si/a", ptr(7))
	subscribe("si/b", nil)
	pub := e.connect(t, clean("pub"))
	check := func(topic string, want *int) {
		t.Helper()
		pub.pub(t, topic, 1, false, topic)
		m := s.in.next(t)
		got := m.Props.SubscriptionIdentifier
		if m.Topic != topic || (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Fatalf("%s: subscription identifier %v, want %v", topic, got, want)
		}
	}
	check("si/a", ptr(7))
	check("si/b", nil)
	subscribe("si/a", ptr(268435455)) // the largest identifier
	check("si/a", ptr(268435455))
}

// testPropertiesPassThrough: payload format, content type, response topic, correlation data
// and user properties (order and repeats kept) reach subscribers unchanged, at every QoS
// and from the retained store [MQTT-3.3.2-4], [MQTT-3.3.2-15..20].
func testPropertiesPassThrough(t *testing.T, e *env) {
	props := func() *paho.PublishProperties {
		return &paho.PublishProperties{
			PayloadFormat:   ptr[byte](1),
			ContentType:     "application/json",
			ResponseTopic:   "pp/reply",
			CorrelationData: []byte{0, 1, 2, 0xff},
			User:            paho.UserProperties{{Key: "a", Value: "1"}, {Key: "b", Value: ""}, {Key: "a", Value: "3"}},
		}
	}
	check := func(t *testing.T, m msg) {
		t.Helper()
		want, p := props(), m.Props
		if p == nil || p.PayloadFormat == nil || *p.PayloadFormat != 1 || p.ContentType != want.ContentType ||
			p.ResponseTopic != want.ResponseTopic || !bytes.Equal(p.CorrelationData, want.CorrelationData) ||
			!equalUser(p.User, want.User) || p.MessageExpiry != nil || p.TopicAlias != nil {
			t.Fatalf("properties %+v, want %+v", p, want)
		}
	}
	sub, _ := e.connect5(t, clean("sub"))
	sub.sub(t, 2, "pp/#")
	pub, _ := e.connect5(t, clean("pub"))
	for q := range byte(3) {
		pub.publish(t, &paho.Publish{Topic: "pp/t", QoS: q, Retain: q == 2, Payload: []byte(`{"x":1}`), Properties: props()})
		m := sub.in.next(t)
		if m.Payload != `{"x":1}` || m.QoS != q {
			t.Fatalf("got %+v", m)
		}
		check(t, m)
	}
	late, _ := e.connect5(t, clean("late"))
	late.sub(t, 1, "pp/t")
	check(t, late.in.next(t))
}

// testPayloadFormatAny: a PUBLISH or a will whose Payload Format Indicator is a value the
// spec does not describe (2..255) is accepted and reaches subscribers with the indicator
// unaltered [MQTT-3.3.2-4]: 3.3.2.3.2 and 3.1.3.2.3 make no value an error. A payload that
// says it is UTF-8 (1) and is not is forwarded as it came: checking it is a MAY (0x99)
// bifrost does not take, as Mosquitto does not.
func testPayloadFormatAny(t *testing.T, e *env) {
	sub, _ := e.connect5(t, clean("sub"))
	sub.sub(t, 1, "pf/#")
	pub := e.raw(t)
	pub.session("pub", false, nil)
	cases := []struct {
		format  byte
		payload string
	}{{2, "two"}, {0x80, "128"}, {0xff, "255"}, {1, "not \xff\xfe utf-8"}, {1, "lines\nand\ttabs"}}
	for i, c := range cases {
		pid := uint16(i + 1)
		pub.send(&packet.Publish{Topic: []byte("pf/t"), Payload: []byte(c.payload), QoS: 1, PacketID: pid,
			Props: packet.Properties{PayloadFormat: packet.Some(c.format)}})
		if ack := pub.expectAck(packet.PUBACK, pid); ack.Code != packet.Success {
			t.Fatalf("format %d: PUBACK %v, want success", c.format, ack.Code)
		}
		m := sub.in.next(t)
		if m.Payload != c.payload || m.Props == nil || m.Props.PayloadFormat == nil || *m.Props.PayloadFormat != c.format {
			t.Fatalf("format %d: got %+v (props %+v), want %q with the indicator unaltered", c.format, m, m.Props, c.payload)
		}
	}
	for i, c := range cases[:4] {
		w := e.raw(t)
		topic := fmt.Sprintf("pf/will/%d", i)
		w.session(fmt.Sprintf("will-%d", i), false, func(cc *packet.Connect) {
			withWill(topic, c.payload, nil, nil)(cc)
			cc.WillProps.PayloadFormat = packet.Some(c.format)
		})
		w.drop()
		m := sub.in.next(t)
		if m.Topic != topic || m.Payload != c.payload || m.Props == nil || m.Props.PayloadFormat == nil ||
			*m.Props.PayloadFormat != c.format {
			t.Fatalf("will: got %+v (props %+v), want %q on %s with payload format %d", m, m.Props, c.payload, topic, c.format)
		}
	}
}

// testNoReasonStrings: packets that succeed carry no reason string or user property the
// client did not ask for (a reason string is only for diagnostics, spec 3.2.2.3.9).
func testNoReasonStrings(t *testing.T, e *env) {
	r := e.raw(t)
	bare := func(what string, p *packet.Properties) {
		t.Helper()
		if p.ReasonString != nil || p.User != nil {
			t.Fatalf("%s carries reason string %q, user properties %v", what, p.ReasonString, p.User)
		}
	}
	ack := r.session("bare", false, nil)
	bare("CONNACK", &ack.Props)
	sa := r.subscribe(1, 2, 0, "rs/t")
	bare("SUBACK", &sa.Props)
	r.send(&packet.Publish{Topic: []byte("rs/t"), Payload: []byte("1"), QoS: 1, PacketID: 2})
	// The client subscribes to what it publishes: its PUBACK and the PUBLISH it receives
	// come in either order.
	for range 2 {
		switch p := r.next().(type) {
		case *packet.Ack:
			if p.PacketType != packet.PUBACK || p.PacketID != 2 || p.Code != packet.Success {
				t.Fatalf("got %v %+v, want PUBACK 2", p.PacketType, p)
			}
			bare("PUBACK", &p.Props)
		case *packet.Publish:
			if string(p.Topic) != "rs/t" || string(p.Payload) != "1" {
				t.Fatalf("got PUBLISH %+v", p)
			}
			bare("PUBLISH", &p.Props)
			r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID})
		default:
			t.Fatalf("got %v", p.Type())
		}
	}
	r.send(&packet.Publish{Topic: []byte("rs/none"), Payload: []byte("2"), QoS: 2, PacketID: 3})
	rec := r.expectAck(packet.PUBREC, 3)
	if rec.Code != packet.NoMatchingSubscribers {
		t.Fatalf("PUBREC %v, want no matching subscribers", rec.Code)
	}
	bare("PUBREC", &rec.Props)
	r.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 3})
	comp := r.expectAck(packet.PUBCOMP, 3)
	bare("PUBCOMP", &comp.Props)
	r.send(&packet.Unsubscribe{PacketID: 4, Filters: [][]byte{[]byte("rs/t"), []byte("rs/never")}})
	ua := expect[*packet.Unsuback](r)
	bare("UNSUBACK", &ua.Props)
	if len(ua.Codes) != 2 || ua.Codes[0] != packet.Success || ua.Codes[1] != packet.NoSubscriptionExisted {
		t.Fatalf("UNSUBACK codes %v", ua.Codes)
	}
	r.send(packet.Pingreq{})
	expect[*packet.Pingresp](r)
}

// testViolations: a protocol violation ends the connection; a 5.0 client first gets a
// DISCONNECT with the reason code for it [MQTT-4.13.1-1] and reads it before the graceful
// close (no reset), a 3.1.1 client has its connection closed.
func testViolations(t *testing.T, e *env) {
	publish := func(topic string, qos byte, pid uint16, payload []byte) *packet.Publish {
		return &packet.Publish{Topic: []byte(topic), QoS: qos, PacketID: pid, Payload: payload}
	}
	aliased := func(topic string, alias uint16) *packet.Publish {
		p := publish(topic, 0, 0, []byte("x"))
		p.Props.TopicAlias = packet.Some(alias)
		return p
	}
	cases := []struct {
		name   string
		only5  bool
		tune   func(*conf.Config)
		before []packet.Packet // sent first, each answered as in flow
		send   packet.Packet   // the violation (nil: raw bytes)
		bytes  []byte
		code   packet.ReasonCode
	}{
		{name: "topic alias above the maximum", only5: true, tune: func(c *conf.Config) { c.MQTT.TopicAliasMaximum = ptr(2) },
			send: aliased("v/t", 3), code: packet.TopicAliasInvalid},
		{name: "topic alias when aliases are off", only5: true, tune: func(c *conf.Config) { c.MQTT.TopicAliasMaximum = ptr(0) },
			send: aliased("v/t", 1), code: packet.TopicAliasInvalid},
		// Spec 3.3.4: "A Topic Alias value of 0 or greater than the Maximum Topic Alias is
		// a Protocol Error, the receiver uses DISCONNECT with Reason Code of 0x94".
		{name: "topic alias 0", only5: true, send: aliased("v/t", 0), code: packet.TopicAliasInvalid},
		{name: "unknown topic alias", only5: true, send: aliased("", 1), code: packet.ProtocolError},
		{name: "QoS above the maximum", tune: func(c *conf.Config) { c.MQTT.MaxQoS = ptr(1) },
			send: publish("v/t", 2, 1, nil), code: packet.QoSNotSupported},
		{name: "retain unavailable", tune: func(c *conf.Config) { c.MQTT.RetainAvailable = ptr(false) },
			send: &packet.Publish{Topic: []byte("v/t"), Retain: true, Payload: []byte("x")}, code: packet.RetainNotSupported},
		{name: "receive maximum exceeded", only5: true, tune: func(c *conf.Config) { c.MQTT.ReceiveMaximum = 2 },
			before: []packet.Packet{publish("v/t", 2, 1, nil), publish("v/t", 2, 2, nil)},
			send:   publish("v/t", 2, 3, nil), code: packet.ReceiveMaximumExceeded},
		{name: "packet too large", tune: func(c *conf.Config) { c.MQTT.MaxPacketSize = 1024 },
			before: []packet.Packet{publish("v/t", 1, 1, make([]byte, 1000))},
			send:   publish("v/t", 1, 2, make([]byte, 2000)), code: packet.PacketTooLarge},
		{name: "second CONNECT", send: &packet.Connect{Version: e.version, ClientID: []byte("again"), CleanStart: true},
			code: packet.ProtocolError},
		{name: "AUTH without an authentication method", only5: true, send: &packet.Auth{Code: packet.ReAuthenticate},
			code: packet.ProtocolError},
		{name: "CONNACK from a client", send: &packet.Connack{}, code: packet.ProtocolError},
		{name: "PUBLISH at QoS 3", bytes: []byte{0x36, 5, 0, 1, 't', 0, 1}, code: packet.MalformedPacket},
		// A topic name with a wildcard breaks [MQTT-3.3.2-2]; like Mosquitto, the codec
		// counts it malformed.
		{name: "topic name with a wildcard", send: publish("v/+", 0, 0, nil), code: packet.MalformedPacket},
	}
	for _, c := range cases {
		if c.only5 && !e.v5() {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			b := e
			if c.tune != nil {
				b = start(t, e.mode, c.tune)
			}
			r := b.raw(t)
			r.session("violator", false, nil)
			for _, p := range c.before {
				r.send(p)
				pp := p.(*packet.Publish)
				if pp.QoS == 1 {
					r.expectAck(packet.PUBACK, pp.PacketID)
				} else {
					r.expectAck(packet.PUBREC, pp.PacketID) // and never PUBREL
				}
			}
			if c.send != nil {
				r.send(c.send)
			} else {
				r.sendBytes(c.bytes)
			}
			if e.v5() {
				r.disconnectedWith(c.code)
			} else {
				r.closed()
			}
		})
	}
}
