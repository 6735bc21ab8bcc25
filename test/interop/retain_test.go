package interop

import (
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// Retained messages: set, replace, clear, the retain flag on delivery, retain handling,
// retain as published and message expiry.
var retainScenarios = []scenario{
	{name: "retained/set-replace-clear", run: testRetainedLifecycle},
	{name: "retained/flag-on-delivery", run: testRetainFlag},
	{name: "retained/retain-handling", versions: only5, run: testRetainHandling},
	{name: "retained/message-expiry", versions: only5, run: testRetainedExpiry},
}

// retainedOf subscribes a new client to filter and then to marker, a topic holding a
// retained message, and returns the retained messages filter got: the broker sends a
// subscription's retained messages before it handles the next SUBSCRIBE, so the marker's
// arrival proves that nothing more is coming for filter.
func retainedOf(t *testing.T, e *env, filter, marker string) []msg {
	t.Helper()
	c := e.connect(t, clean(e.id("probe")))
	c.sub(t, 1, filter)
	c.sub(t, 1, marker)
	got := c.inbox().until(t, marker)
	c.disconnect(t)
	return got
}

// testRetainedLifecycle: a retained message is stored [MQTT-3.3.1-5] and sent, with the
// retain flag, to new subscriptions [MQTT-3.3.1-6]; a newer one replaces it; an empty
// retained message clears it and is not stored [MQTT-3.3.1-10], [MQTT-3.3.1-11].
func testRetainedLifecycle(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	pub.pub(t, "rt/marker", 1, true, "marker")
	check := func(want ...string) {
		t.Helper()
		got := retainedOf(t, e, "rt/#", "rt/marker")
		if len(got) != len(want) {
			t.Fatalf("retained %+v, want %q", got, want)
		}
		for i, m := range got {
			if m.Payload != want[i] || !m.Retain || m.QoS != 1 {
				t.Fatalf("retained %+v, want %q with the retain flag at QoS 1", m, want[i])
			}
		}
	}
	check()
	pub.pub(t, "rt/t", 1, true, "one")
	check("one")
	pub.pub(t, "rt/t", 2, true, "two")
	check("two")
	pub.pub(t, "rt/t", 1, false, "not retained")
	check("two")
	pub.pub(t, "rt/t", 1, true, "")
	check()
}

// testRetainFlag: a message that reaches an existing subscription goes out with retain 0
// in 3.1.1 [MQTT-3.3.1-9 of 3.1.1], and in 5.0 with the publisher's flag only for a
// subscription with Retain As Published [MQTT-3.3.1-12], [MQTT-3.3.1-13]; a retained
// message sent because of a new subscription always has it.
func testRetainFlag(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	plain := e.connect(t, clean("plain"))
	plain.sub(t, 1, "rf/t")
	var rap *client5
	if e.v5() {
		rap, _ = e.connect5(t, clean("rap"))
		rap.subscribe(t, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "rf/t", QoS: 1, RetainAsPublished: true}}})
	}
	pub.pub(t, "rf/t", 1, true, "r")
	if m := plain.inbox().next(t); m.Payload != "r" || m.Retain {
		t.Fatalf("live delivery %+v, want retain 0", m)
	}
	if rap != nil {
		if m := rap.inbox().next(t); m.Payload != "r" || !m.Retain {
			t.Fatalf("live delivery to Retain As Published %+v, want retain 1", m)
		}
		pub.pub(t, "rf/t", 1, false, "n")
		if m := rap.inbox().next(t); m.Payload != "n" || m.Retain {
			t.Fatalf("live delivery to Retain As Published %+v, want retain 0", m)
		}
	}
	late := e.connect(t, clean("late"))
	late.sub(t, 1, "rf/t")
	if m := late.inbox().next(t); m.Payload != "r" || !m.Retain {
		t.Fatalf("delivery on subscribe %+v, want retain 1", m)
	}
}

// testRetainHandling: Retain Handling 0 sends retained messages on every subscribe, 1 only
// when the subscription is new, 2 never [MQTT-3.3.1-9], [MQTT-3.3.1-10], [MQTT-3.3.1-11];
// a shared subscription never gets them (spec 4.8.2).
func testRetainHandling(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	pub.pub(t, "rh/t", 1, true, "r")
	pub.pub(t, "rh/marker", 1, true, "m")

	// retained subscribes c to filter with retain handling h (a second time when again),
	// then to the marker, and returns what arrived for filter.
	retained := func(c *client5, filter string, h byte) []msg {
		t.Helper()
		c.subscribe(t, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1, RetainHandling: h}}})
		c.subscribe(t, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "rh/marker", QoS: 1}}})
		return c.in.until(t, "rh/marker")
	}
	for _, c := range []struct {
		name          string
		filter        string
		handling      byte
		first, second int // retained messages on the first and second subscribe
	}{
		{"0 send on every subscribe", "rh/t", 0, 1, 1},
		{"1 send on a new subscription", "rh/t", 1, 1, 0},
		{"2 never send", "rh/t", 2, 0, 0},
		{"0 on a shared subscription", "$share/g/rh/t", 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := e.connect5(t, clean(e.id("rh")))
			if got := retained(s, c.filter, c.handling); len(got) != c.first {
				t.Fatalf("first subscribe got %+v, want %d retained", got, c.first)
			}
			if got := retained(s, c.filter, c.handling); len(got) != c.second {
				t.Fatalf("second subscribe got %+v, want %d retained", got, c.second)
			}
		})
	}
}

// testRetainedExpiry: a retained message's expiry counts down while it is stored: it is
// sent with the interval left [MQTT-3.3.2-6] and no longer sent once expired [MQTT-3.3.2-5].
func testRetainedExpiry(t *testing.T, e *env) {
	pub, _ := e.connect5(t, clean("pub"))
	published := time.Now()
	for _, m := range []struct {
		topic  string
		expiry *uint32
	}{{"rx/long", ptr[uint32](60)}, {"rx/short", ptr[uint32](1)}, {"rx/marker", nil}} {
		pub.publish(t, &paho.Publish{Topic: m.topic, QoS: 1, Retain: true, Payload: []byte(m.topic),
			Properties: &paho.PublishProperties{MessageExpiry: m.expiry}})
	}
	got := retainedOf(t, e, "rx/short", "rx/marker")
	if len(got) != 1 || got[0].Props.MessageExpiry == nil || *got[0].Props.MessageExpiry > 1 {
		t.Fatalf("retained rx/short: got %+v, want it with expiry 1", got)
	}
	testenv.WaitFor(t, "the retained message to expire", func() bool {
		return len(retainedOf(t, e, "rx/short", "rx/marker")) == 0
	})
	if time.Since(published) < time.Second {
		t.Fatal("expired before its expiry interval")
	}
	got = retainedOf(t, e, "rx/long", "rx/marker")
	if len(got) != 1 || got[0].Props.MessageExpiry == nil || *got[0].Props.MessageExpiry > 59 {
		t.Fatalf("retained rx/long: got %+v, want it with less than 60s left", got)
	}
}
