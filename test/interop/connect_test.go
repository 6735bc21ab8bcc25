package interop

import (
	"fmt"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// CONNECT and CONNACK: return and reason codes, sessions, takeover, expiry, keep alive and
// what CONNACK advertises.
var connectScenarios = []scenario{
	{name: "connect/unsupported-protocol", run: testUnsupportedProtocol},
	{name: "connect/client-identifier", run: testClientIdentifier},
	{name: "connect/malformed", run: testMalformedConnect},
	{name: "connect/will-beyond-limits", run: testWillBeyondLimits, tune: func(c *conf.Config) {
		c.MQTT.MaxQoS, c.MQTT.RetainAvailable = ptr(1), ptr(false)
	}},
	{name: "connect/session-present", run: testSessionPresent},
	{name: "connect/takeover", run: testTakeover},
	{name: "connect/session-expiry", versions: only5, run: testSessionExpiry},
	{name: "connect/server-keep-alive", versions: only5, run: testServerKeepAlive,
		tune: func(c *conf.Config) { c.MQTT.MaxKeepalive = 5 }},
	{name: "connect/connack-properties", versions: only5, run: testConnackProperties},
	{name: "connect/auth-method", versions: only5, run: testAuthMethod},
}

// connectBytes is a CONNECT with the given protocol name and level, clean session, keep
// alive 60 and client id "x", written by hand: the codec only writes what it supports.
func connectBytes(name string, level byte) []byte {
	body := []byte{0, byte(len(name))}
	body = append(body, name...)
	body = append(body, level, 0x02, 0, 60, 0, 1, 'x')
	if level == byte(packet.V5) {
		body = append(body[:len(body)-3], 0, 0, 1, 'x') // an empty property section
	}
	return append([]byte{byte(packet.CONNECT) << 4, byte(len(body))}, body...)
}

// testUnsupportedProtocol: a CONNECT for a protocol the broker does not speak gets a
// CONNACK in the version the client asked for, refusing it (3.1.1: 0x01; 5.0: 0x84), and
// the connection is closed [MQTT-3.1.2-2].
func testUnsupportedProtocol(t *testing.T, e *env) {
	type tc struct {
		name  string
		proto string
		level byte
	}
	cases := []tc{
		{"MQTT level 6", "MQTT", 6},
		{"MQTT level 3", "MQTT", 3},
		{"MQIsdp level 4", "MQIsdp", 4},
	}
	if e.v5() {
		// A 5.0 level under another protocol name: refused in 5.0's terms.
		cases = []tc{{"MQIsdp level 5", "MQIsdp", 5}}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.raw(t)
			r.sendBytes(connectBytes(c.proto, c.level))
			ack := expect[*packet.Connack](r)
			// Decoding in the mode's version checks the CONNACK's shape: two bytes in
			// 3.1.1 (return code 0x01), a reason code and properties in 5.0 (0x84).
			if ack.Code != packet.UnsupportedProtocolVersion || ack.SessionPresent {
				t.Fatalf("CONNACK %+v, want unsupported protocol version", ack)
			}
			r.closedGracefully()
		})
	}
	t.Run("MQIsdp level 3 accepted", func(t *testing.T) {
		r := e.rawVersion(t, packet.V31)
		r.connect(&packet.Connect{ClientID: []byte("mqtt31"), CleanStart: true})
	})
}

// testClientIdentifier: an empty client id is refused without clean session in 3.1.1
// (0x02) [MQTT-3.1.3-8] and always in 3.1; it is accepted with clean session, and in 5.0
// the broker assigns one and says which [MQTT-3.1.3-6], [MQTT-3.2.2-16].
func testClientIdentifier(t *testing.T, e *env) {
	if !e.v5() {
		t.Run("empty without clean session", func(t *testing.T) {
			_, code, err := e.dial3(t, opts{id: "", clean: false})
			if err == nil || code != packet.ConnRefusedIdentifierRejected {
				t.Fatalf("connect: code %#x, err %v; want identifier rejected (0x02)", code, err)
			}
		})
		t.Run("empty with clean session", func(t *testing.T) {
			c := e.connect3(t, clean(""))
			c.sub(t, 1, "cid/t")
			c.pub(t, "cid/t", 1, false, "hi")
			if m := c.inbox().next(t); m.Payload != "hi" {
				t.Fatalf("got %q", m.Payload)
			}
		})
		t.Run("empty in 3.1", func(t *testing.T) {
			r := e.rawVersion(t, packet.V31)
			ack := r.tryConnect(&packet.Connect{CleanStart: true})
			if ack.Code != packet.ClientIdentifierNotValid {
				t.Fatalf("CONNACK %v, want identifier rejected", ack.Code)
			}
			r.closedGracefully()
		})
		return
	}
	t.Run("empty gets an assigned identifier", func(t *testing.T) {
		c1, ack1 := e.connect5(t, opts{id: "", expiry: ptr[uint32](60)})
		c2, ack2 := e.connect5(t, clean(""))
		id1, id2 := ack1.Properties.AssignedClientID, ack2.Properties.AssignedClientID
		if id1 == "" || id2 == "" || id1 == id2 {
			t.Fatalf("assigned client ids %q and %q, want two different ones", id1, id2)
		}
		if c1.c.ClientID() != id1 {
			t.Fatalf("paho uses %q, want %q", c1.c.ClientID(), id1)
		}
		c1.sub(t, 1, "cid/t")
		c1.disconnect(t)
		c2.disconnect(t)
		// The assigned id names a real session: resuming it finds the subscription.
		c3, ack3 := e.connect5(t, opts{id: id1, expiry: ptr[uint32](60)})
		if !ack3.SessionPresent || ack3.Properties.AssignedClientID != "" {
			t.Fatalf("resume with the assigned id: %+v", ack3)
		}
		p := e.connect(t, clean("cid-pub"))
		p.pub(t, "cid/t", 1, false, "hi")
		if m := c3.inbox().next(t); m.Payload != "hi" {
			t.Fatalf("got %q", m.Payload)
		}
	})
}

// testMalformedConnect: a CONNECT the codec refuses gets CONNACK 0x81 in 5.0 and is then
// closed (spec 3.1.4); before 5.0 the connection is closed without a CONNACK.
func testMalformedConnect(t *testing.T, e *env) {
	good := func() []byte {
		c := &packet.Connect{Version: e.version, ClientID: []byte("bad"), CleanStart: true, KeepAlive: 60}
		return c.AppendTo(nil, e.version)
	}
	const flags = 9 // fixed header 2, protocol name 6, level 1
	cases := []struct {
		name  string
		bytes func() []byte
	}{
		{"reserved flag set", func() []byte { b := good(); b[flags] |= 0x01; return b }},          // [MQTT-3.1.2-3]
		{"will QoS without will flag", func() []byte { b := good(); b[flags] |= 0x08; return b }}, // [MQTT-3.1.2-11]
		{"truncated client id", func() []byte { b := good(); b[1]--; return b[:len(b)-1] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.raw(t)
			r.sendBytes(c.bytes())
			if e.v5() {
				ack := expect[*packet.Connack](r)
				if ack.Code != packet.MalformedPacket {
					t.Fatalf("CONNACK %v, want malformed packet (0x81)", ack.Code)
				}
			}
			r.closed()
		})
	}
}

// testWillBeyondLimits: with maximum QoS 1 and no retain, a 5.0 will asking for more is
// refused (0x9B, 0x9A) [MQTT-3.2.2-12], [MQTT-3.2.2-13]; a 3.1.1 will, which cannot be told
// about limits, is accepted and published within them.
func testWillBeyondLimits(t *testing.T, e *env) {
	if e.v5() {
		for _, c := range []struct {
			name string
			will *will
			code byte
		}{
			{"will QoS 2", &will{topic: "w/t", payload: "x", qos: 2}, byte(packet.QoSNotSupported)},
			{"will retained", &will{topic: "w/t", payload: "x", retain: true}, byte(packet.RetainNotSupported)},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, ack, err := e.dial5(t, opts{id: e.id("w"), clean: true, will: c.will})
				if err == nil || ack == nil || ack.ReasonCode != c.code {
					t.Fatalf("connect: %v, CONNACK %+v; want reason code %#x", err, ack, c.code)
				}
			})
		}
		return
	}
	obs := e.connect(t, clean("observer"))
	obs.sub(t, 2, "w/#")
	r := e.raw(t)
	r.connect(&packet.Connect{ClientID: []byte("w"), CleanStart: true, KeepAlive: 60,
		WillFlag: true, WillQoS: 2, WillRetain: true, WillTopic: []byte("w/t"), WillPayload: []byte("gone")})
	r.drop()
	m := obs.inbox().next(t)
	if m.Topic != "w/t" || m.Payload != "gone" || m.QoS != 1 {
		t.Fatalf("will %+v, want w/t gone at QoS 1", m)
	}
}

// testSessionPresent: a persistent session is resumed with session present set and its
// subscriptions and queued messages kept [MQTT-3.2.2-2]; clean session / clean start
// discards it [MQTT-3.1.2-4], [MQTT-3.2.2-1].
func testSessionPresent(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))

	s := e.connect(t, persistent("s"))
	if s.present() {
		t.Fatal("session present on the first connection")
	}
	s.sub(t, 1, "sp/t")
	s.disconnect(t)
	pub.pub(t, "sp/t", 1, false, "queued")

	s = e.connect(t, persistent("s"))
	if !s.present() {
		t.Fatal("session not present on resume")
	}
	if m := s.inbox().next(t); m.Payload != "queued" || m.QoS != 1 {
		t.Fatalf("got %+v, want the message queued while offline", m)
	}
	s.disconnect(t)

	s = e.connect(t, opts{id: "s", clean: true, expiry: ptr[uint32](300)})
	if s.present() {
		t.Fatal("session present with clean start")
	}
	s.sub(t, 1, "sp/marker")
	pub.pub(t, "sp/t", 1, false, "lost")
	pub.pub(t, "sp/marker", 1, false, "")
	if got := s.inbox().until(t, "sp/marker"); len(got) != 0 {
		t.Fatalf("clean start kept the old subscription: got %+v", got)
	}
}

// testTakeover: a second connection with a live client id takes the session over: the old
// 5.0 client gets DISCONNECT 0x8E [MQTT-3.1.4-3], the old 3.1.1 client is disconnected; the
// old connection's will is published, and the new one continues the session.
func testTakeover(t *testing.T, e *env) {
	obs := e.connect(t, clean("observer"))
	obs.sub(t, 1, "to/#")

	o := persistent("dup")
	o.will = &will{topic: "to/will", payload: "old gone", qos: 1}
	old := e.connect(t, o)
	old.sub(t, 1, "to/t")

	nw := e.connect(t, persistent("dup"))
	if !nw.present() {
		t.Fatal("the new connection did not find the session")
	}
	if c5, ok := old.(*client5); ok {
		if rc := c5.serverDisconnect(t); rc != byte(packet.SessionTakenOver) {
			t.Fatalf("old client got DISCONNECT %#x, want 0x8E", rc)
		}
	} else {
		select {
		case <-old.lost():
		case <-timeout():
			t.Fatal("old client still connected")
		}
	}
	if m := obs.inbox().next(t); m.Topic != "to/will" || m.Payload != "old gone" {
		t.Fatalf("observer got %+v, want the old connection's will", m)
	}
	obs.pub(t, "to/t", 1, false, "for the new one")
	if m := nw.inbox().next(t); m.Payload != "for the new one" {
		t.Fatalf("new connection got %+v", m)
	}
	if m := obs.inbox().next(t); m.Topic != "to/t" {
		t.Fatalf("observer got %+v", m)
	}
	obs.inbox().empty(t)
}

// testSessionExpiry: a 5.0 session with expiry 0 ends with its connection; one with an
// expiry resumes within it and ends after it, its subscriptions gone; DISCONNECT may
// shorten the expiry but not raise it from 0 [MQTT-3.14.2-2].
func testSessionExpiry(t *testing.T, e *env) {
	pub, _ := e.connect5(t, clean("pub"))

	// leave connects id with the given expiry, subscribes, then disconnects normally and
	// waits for the broker to close the connection, so the broker has seen the
	// DISCONNECT before the test goes on.
	leave := func(t *testing.T, id string, expiry *uint32, dprops *packet.Properties) {
		r := e.raw(t)
		c := &packet.Connect{ClientID: []byte(id), KeepAlive: 60}
		if expiry != nil {
			c.Props.SessionExpiry = packet.Some(*expiry)
		}
		if ack := r.connect(c); ack.SessionPresent {
			t.Fatal("session present on the first connection")
		}
		r.subscribe(1, 1, 0, "se/"+id)
		d := &packet.Disconnect{}
		if dprops != nil {
			d.Props = *dprops
		}
		r.send(d)
		r.closed()
	}
	resume := func(t *testing.T, id string) *packet.Connack {
		r := e.raw(t)
		return r.connect(&packet.Connect{ClientID: []byte(id), KeepAlive: 60, Props: packet.Properties{SessionExpiry: packet.Some[uint32](60)}})
	}

	t.Run("expiry 0", func(t *testing.T) {
		leave(t, "zero", nil, nil)
		if resume(t, "zero").SessionPresent {
			t.Fatal("a session with expiry 0 outlived its connection")
		}
	})
	t.Run("expiry 1s", func(t *testing.T) {
		leave(t, "one", ptr[uint32](1), nil)
		r := e.raw(t)
		ack := r.connect(&packet.Connect{ClientID: []byte("one"), KeepAlive: 60, Props: packet.Properties{SessionExpiry: packet.Some[uint32](1)}})
		if !ack.SessionPresent {
			t.Fatal("session not present within its expiry")
		}
		r.leave()
		// While the session lives, a QoS 1 PUBLISH to its filter finds a subscriber; once
		// it has expired, PUBACK says no matching subscribers (0x10).
		testenv.WaitFor(t, "the session to expire", func() bool {
			rp := pub.publish(t, &paho.Publish{Topic: "se/one", QoS: 1, Payload: []byte("probe")})
			return rp.ReasonCode == byte(packet.NoMatchingSubscribers)
		})
		if resume(t, "one").SessionPresent {
			t.Fatal("session present after its expiry")
		}
	})
	t.Run("DISCONNECT sets expiry 0", func(t *testing.T) {
		leave(t, "cut", ptr[uint32](300), &packet.Properties{SessionExpiry: packet.Some[uint32](0)})
		if resume(t, "cut").SessionPresent {
			t.Fatal("session outlived a DISCONNECT with expiry 0")
		}
	})
	t.Run("DISCONNECT raises expiry from 0", func(t *testing.T) {
		r := e.raw(t)
		r.connect(&packet.Connect{ClientID: []byte("raise"), KeepAlive: 60})
		r.send(&packet.Disconnect{Props: packet.Properties{SessionExpiry: packet.Some[uint32](60)}})
		r.disconnectedWith(packet.ProtocolError)
	})
}

// testServerKeepAlive: with mqtt.max_keepalive set, a 5.0 client asking for more (or for
// none) is told the keep alive to use in CONNACK's Server Keep Alive [MQTT-3.2.2-21].
func testServerKeepAlive(t *testing.T, e *env) {
	for _, c := range []struct {
		asked uint16
		want  packet.Opt[uint16]
	}{
		{60, packet.Some[uint16](5)},
		{0, packet.Some[uint16](5)},
		{5, packet.Opt[uint16]{}},
		{3, packet.Opt[uint16]{}},
	} {
		t.Run(fmtKeepAlive(c.asked), func(t *testing.T) {
			r := e.raw(t)
			ack := r.connect(&packet.Connect{ClientID: []byte(e.id("ka")), CleanStart: true, KeepAlive: c.asked})
			if ack.Props.ServerKeepAlive != c.want {
				t.Fatalf("Server Keep Alive %+v, want %+v", ack.Props.ServerKeepAlive, c.want)
			}
		})
	}
	t.Run("paho uses it", func(t *testing.T) {
		_, ack := e.connect5(t, opts{id: "paho", clean: true, keepAlive: 120})
		if ka := ack.Properties.ServerKeepAlive; ka == nil || *ka != 5 {
			t.Fatalf("Server Keep Alive %v, want 5", ka)
		}
	})
}

func fmtKeepAlive(s uint16) string { return fmt.Sprintf("keep alive %d", s) }

// testConnackProperties: CONNACK advertises the limits the broker enforces, for several
// configurations: receive maximum, maximum packet size, topic alias maximum, maximum QoS,
// retain available, wildcard / subscription identifier / shared subscription available, and
// a capped session expiry. Absent properties mean the spec's defaults.
func testConnackProperties(t *testing.T, e *env) {
	type want struct {
		recvMax   packet.Opt[uint16]
		maxPacket packet.Opt[uint32]
		aliasMax  uint16 // absent means 0
		maxQoS    packet.Opt[uint8]
		retain    packet.Opt[uint8]
		expiry    packet.Opt[uint32]
	}
	for _, c := range []struct {
		name string
		tune func(*conf.Config)
		want want
	}{
		{"defaults", nil, want{recvMax: packet.Some[uint16](1024), maxPacket: packet.Some[uint32](1 << 20), aliasMax: 64}},
		{"limits", func(c *conf.Config) {
			c.MQTT.ReceiveMaximum = 10
			c.MQTT.MaxPacketSize = 2048
			c.MQTT.TopicAliasMaximum = ptr(0)
			c.MQTT.MaxQoS = ptr(1)
			c.MQTT.RetainAvailable = ptr(false)
		}, want{recvMax: packet.Some[uint16](10), maxPacket: packet.Some[uint32](2048), maxQoS: packet.Some[uint8](1),
			retain: packet.Some[uint8](0)}},
		{"QoS 0 only", func(c *conf.Config) { c.MQTT.MaxQoS = ptr(0) },
			want{recvMax: packet.Some[uint16](1024), maxPacket: packet.Some[uint32](1 << 20), aliasMax: 64, maxQoS: packet.Some[uint8](0)}},
		{"session expiry capped", func(c *conf.Config) { c.MQTT.SessionExpiryMax = 10 },
			want{recvMax: packet.Some[uint16](1024), maxPacket: packet.Some[uint32](1 << 20), aliasMax: 64, expiry: packet.Some[uint32](10)}},
		{"receive maximum 65535", func(c *conf.Config) { c.MQTT.ReceiveMaximum = 65535 },
			want{maxPacket: packet.Some[uint32](1 << 20), aliasMax: 64}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := start(t, e.mode, c.tune)
			r := b.raw(t)
			ack := r.connect(&packet.Connect{ClientID: []byte("props"), CleanStart: true, KeepAlive: 60,
				Props: packet.Properties{SessionExpiry: packet.Some[uint32](100)}})
			p := &ack.Props
			got := want{recvMax: p.ReceiveMaximum, maxPacket: p.MaximumPacketSize, aliasMax: p.TopicAliasMaximum.V,
				maxQoS: p.MaximumQoS, retain: p.RetainAvailable, expiry: p.SessionExpiry}
			if got != c.want {
				t.Errorf("CONNACK limits %+v, want %+v", got, c.want)
			}
			for name, o := range map[string]packet.Opt[uint8]{
				"wildcard": p.WildcardSubAvailable, "subscription id": p.SubIDAvailable, "shared": p.SharedSubAvailable,
			} {
				if o.Get(1) != 1 {
					t.Errorf("%s subscriptions available = %d, but the broker supports them", name, o.V)
				}
			}
			if p.ReasonString != nil || p.AssignedClientID != nil || p.ServerKeepAlive.Set || ack.SessionPresent {
				t.Errorf("unexpected CONNACK content %+v", ack)
			}
			// What is advertised is what holds: a subscription is granted at most the
			// maximum QoS, and a wildcard, shared and identified subscription works.
			sub := &packet.Subscribe{PacketID: 1, Props: packet.Properties{SubscriptionIDs: []uint32{4}},
				Subscriptions: []packet.Subscription{{Filter: []byte("$share/g/a/+"), QoS: 2}, {Filter: []byte("a/#"), QoS: 2}}}
			sa := r.subscribePacket(sub)
			wantQoS := packet.ReasonCode(c.want.maxQoS.Get(2))
			if len(sa.Codes) != 2 || sa.Codes[0] != wantQoS || sa.Codes[1] != wantQoS {
				t.Errorf("SUBACK %v, want QoS %d granted twice", sa.Codes, wantQoS)
			}
		})
	}
}

// testAuthMethod: enhanced authentication is not offered, so a CONNECT naming an
// authentication method is refused with 0x8C [MQTT-4.12.0-1].
func testAuthMethod(t *testing.T, e *env) {
	r := e.raw(t)
	ack := r.tryConnect(&packet.Connect{ClientID: []byte("auth"), CleanStart: true, KeepAlive: 60,
		Props: packet.Properties{AuthMethod: []byte("SCRAM-SHA-256"), AuthData: []byte("client-first")}})
	if ack.Code != packet.BadAuthenticationMethod {
		t.Fatalf("CONNACK %v, want bad authentication method (0x8C)", ack.Code)
	}
	r.closedGracefully()
}
