package interop

import (
	"bytes"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Will messages: when they are published, when not, their delay and their properties.
var willScenarios = []scenario{
	{name: "will/keepalive-timeout", run: testWillKeepAlive},
	{name: "will/network-error", run: testWillNetworkError},
	{name: "will/protocol-error", run: testWillProtocolError},
	{name: "will/normal-disconnect", run: testWillNormalDisconnect},
	{name: "will/disconnect-with-will", versions: only5, run: testWillDisconnectWithWill},
	{name: "will/delay", versions: only5, run: testWillDelay},
	{name: "will/properties", versions: only5, run: testWillProperties},
}

// observe connects a client subscribed to will/# at QoS 1.
func observe(t *testing.T, e *env) client {
	t.Helper()
	obs := e.connect(t, clean("observer"))
	obs.sub(t, 1, "will/#")
	return obs
}

// withWill returns a raw CONNECT option adding a will on topic with payload; in 5.0 with
// the will delay and session expiry given (seconds; nil leaves them out).
func withWill(topic, payload string, delay, expiry *uint32) func(*packet.Connect) {
	return func(c *packet.Connect) {
		c.WillFlag, c.WillQoS = true, 1
		c.WillTopic, c.WillPayload = []byte(topic), []byte(payload)
		if c.Version == packet.V5 {
			if delay != nil {
				c.WillProps.WillDelay = packet.Some(*delay)
			}
			if expiry != nil {
				c.Props.SessionExpiry = packet.Some(*expiry)
			}
		}
	}
}

// expectWill fails the test unless the next message obs receives is the will on topic.
func expectWill(t *testing.T, obs client, topic, payload string) msg {
	t.Helper()
	m := obs.inbox().next(t)
	if m.Topic != topic || m.Payload != payload {
		t.Fatalf("got %+v, want the will %q on %q", m, payload, topic)
	}
	return m
}

// testWillKeepAlive: a client silent for one and a half keep alive periods is disconnected
// [MQTT-3.1.2-24] and its will published.
func testWillKeepAlive(t *testing.T, e *env) {
	obs := observe(t, e)
	r := e.raw(t)
	start := time.Now()
	r.session("silent", false, func(c *packet.Connect) {
		c.KeepAlive = 1
		withWill("will/ka", "timed out", nil, nil)(c)
	})
	expectWill(t, obs, "will/ka", "timed out")
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("disconnected after %v, before one and a half keep alive periods", d)
	}
	r.closed()
}

// testWillNetworkError: a connection lost without DISCONNECT publishes the will
// [MQTT-3.1.2-8]; a retained will is stored as a retained message.
func testWillNetworkError(t *testing.T, e *env) {
	obs := observe(t, e)
	r := e.raw(t)
	r.session("dropped", false, func(c *packet.Connect) {
		withWill("will/net", "lost", nil, nil)(c)
		c.WillRetain = true
	})
	r.drop()
	if m := expectWill(t, obs, "will/net", "lost"); m.QoS != 1 {
		t.Fatalf("will at QoS %d, want 1", m.QoS)
	}
	late := e.connect(t, clean("late"))
	late.sub(t, 1, "will/net")
	if m := late.inbox().next(t); m.Payload != "lost" || !m.Retain {
		t.Fatalf("got %+v, want the retained will", m)
	}
}

// testWillProtocolError: a connection the broker closes over a protocol violation
// publishes the will (the DISCONNECT was not the client's) [MQTT-3.1.2-8].
func testWillProtocolError(t *testing.T, e *env) {
	obs := observe(t, e)
	r := e.raw(t)
	r.session("violator", false, withWill("will/proto", "violated", nil, nil))
	r.send(&packet.Connect{Version: e.version, ClientID: []byte("violator"), CleanStart: true})
	if e.v5() {
		r.disconnectedWith(packet.ProtocolError)
	} else {
		r.closed()
	}
	expectWill(t, obs, "will/proto", "violated")
}

// testWillNormalDisconnect: a normal DISCONNECT discards the will [MQTT-3.14.4-3]. The
// observer watches for quiet: no later event could stand in for a will that never comes.
func testWillNormalDisconnect(t *testing.T, e *env) {
	obs := observe(t, e)
	o := clean("polite")
	o.will = &will{topic: "will/polite", payload: "should not", qos: 1}
	c := e.connect(t, o)
	c.disconnect(t)
	obs.inbox().none(t)

	r := e.raw(t)
	r.session("polite-raw", false, withWill("will/polite", "should not", nil, nil))
	r.leave()
	obs.inbox().none(t)
}

// testWillDisconnectWithWill: DISCONNECT with reason code 0x04 asks for the will
// [MQTT-3.14.4-3].
func testWillDisconnectWithWill(t *testing.T, e *env) {
	obs := observe(t, e)
	o := clean("leaver")
	o.will = &will{topic: "will/asked", payload: "as asked", qos: 1}
	c, _ := e.connect5(t, o)
	c.disconnectWith(t, &paho.Disconnect{ReasonCode: byte(packet.DisconnectWithWillMessage)})
	expectWill(t, obs, "will/asked", "as asked")
}

// testWillDelay: the will delay interval defers the will [MQTT-3.1.3-9]; a reconnect within
// it cancels the will; a session that ends first sends it then; without a session to
// outlive the connection, it goes at once.
func testWillDelay(t *testing.T, e *env) {
	obs := observe(t, e)
	t.Run("published after the delay", func(t *testing.T) {
		r := e.raw(t)
		r.session("delayed", false, withWill("will/delayed", "late", ptr[uint32](1), ptr[uint32](60)))
		dropped := time.Now()
		r.drop()
		expectWill(t, obs, "will/delayed", "late")
		if d := time.Since(dropped); d < time.Second {
			t.Fatalf("will published %v after the connection closed, before its 1s delay", d)
		}
	})
	t.Run("cancelled by a reconnect", func(t *testing.T) {
		r := e.raw(t)
		// A delay of 3s, not 1s: the reconnect must come within it even on a loaded machine.
		r.session("back", false, withWill("will/back", "must not", ptr[uint32](3), ptr[uint32](60)))
		marker := e.raw(t)
		marker.session("marker", false, withWill("will/marker", "marker", ptr[uint32](4), ptr[uint32](60)))
		r.drop()
		r = e.raw(t)
		if ack := r.session("back", true, nil); !ack.SessionPresent {
			t.Fatal("session not present")
		}
		// The marker's will, started later and delayed a second longer, comes well after
		// the cancelled one would have.
		marker.drop()
		expectWill(t, obs, "will/marker", "marker")
	})
	t.Run("taken over with clean start 1", func(t *testing.T) {
		// The new connection ends the session, and the will goes with it at once
		// (spec 3.1.3.2.2), whatever its delay.
		r := e.raw(t)
		r.session("taken", false, withWill("will/taken", "session ended", ptr[uint32](30), ptr[uint32](60)))
		start := time.Now()
		e.raw(t).session("taken", false, nil)
		expectWill(t, obs, "will/taken", "session ended")
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("will published after %v: it waited for its delay", d)
		}
	})
	t.Run("taken over with clean start 0", func(t *testing.T) {
		// The session goes on with the new connection, within the delay: no will.
		r := e.raw(t)
		r.session("kept", false, withWill("will/kept", "must not", ptr[uint32](3), ptr[uint32](60)))
		marker := e.raw(t)
		marker.session("marker2", false, withWill("will/marker2", "marker", ptr[uint32](4), ptr[uint32](60)))
		if ack := e.raw(t).session("kept", true, nil); !ack.SessionPresent {
			t.Fatal("session not present")
		}
		marker.drop()
		expectWill(t, obs, "will/marker2", "marker")
	})
	t.Run("session ends before the delay", func(t *testing.T) {
		r := e.raw(t)
		r.session("short", false, withWill("will/short", "session over", ptr[uint32](30), ptr[uint32](1)))
		r.drop()
		start := time.Now()
		expectWill(t, obs, "will/short", "session over")
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("will published after %v: it waited for the delay, not the session's end", d)
		}
	})
	t.Run("no session expiry", func(t *testing.T) {
		r := e.raw(t)
		r.session("none", false, withWill("will/none", "now", ptr[uint32](30), nil))
		r.drop()
		expectWill(t, obs, "will/none", "now")
	})
}

// testWillProperties: a will's properties reach subscribers unchanged: payload format,
// content type, response topic, correlation data and user properties in order
// [MQTT-3.1.3-10 and the PUBLISH rules]; its message expiry counts from publication. The
// will is set by the raw client: paho.golang v0.23.0 packs will properties as CONNECT
// properties and drops all but the user properties.
func testWillProperties(t *testing.T, e *env) {
	obs, _ := e.connect5(t, clean("observer"))
	obs.sub(t, 1, "will/#")
	wp := packet.Properties{
		PayloadFormat:   packet.Some[uint8](1),
		MessageExpiry:   packet.Some[uint32](120),
		ContentType:     []byte("text/plain"),
		ResponseTopic:   []byte("will/reply"),
		CorrelationData: []byte{0, 1, 2, 0xff},
		User: []packet.UserProperty{{Key: []byte("k"), Value: []byte("1")}, {Key: []byte("j"), Value: []byte("2")},
			{Key: []byte("k"), Value: []byte("3")}},
	}
	r := e.raw(t)
	r.session("propertied", false, func(c *packet.Connect) {
		withWill("will/props", "with properties", nil, nil)(c)
		c.WillProps = wp
	})
	r.send(&packet.Disconnect{Code: packet.DisconnectWithWillMessage})
	m := obs.in.next(t)
	p := m.Props
	if m.Topic != "will/props" || m.Payload != "with properties" || p == nil {
		t.Fatalf("got %+v", m)
	}
	wantUser := paho.UserProperties{{Key: "k", Value: "1"}, {Key: "j", Value: "2"}, {Key: "k", Value: "3"}}
	if p.PayloadFormat == nil || *p.PayloadFormat != 1 || p.ContentType != "text/plain" ||
		p.ResponseTopic != "will/reply" || !bytes.Equal(p.CorrelationData, wp.CorrelationData) ||
		!equalUser(p.User, wantUser) {
		t.Fatalf("will properties %+v, want those of %+v", p, wp)
	}
	if p.MessageExpiry == nil || *p.MessageExpiry > 120 || *p.MessageExpiry < 110 {
		t.Fatalf("will message expiry %v, want about 120", p.MessageExpiry)
	}
}

func equalUser(a, b paho.UserProperties) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
