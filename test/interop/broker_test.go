package interop

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The broker as a whole: $SYS, the embedding API, graceful shutdown.
var brokerScenarios = []scenario{
	{name: "sys/topics", run: testSys, tune: func(c *conf.Config) {
		iv := conf.Duration(100 * time.Millisecond)
		c.SysInterval = &iv
	}},
	{name: "embed/publish-subscribe", run: testEmbedding},
	{name: "close/graceful", run: testGracefulClose},
}

// sysWatcher keeps the latest value of every $SYS topic a client receives.
type sysWatcher struct {
	mu     sync.Mutex
	values map[string]string
}

func (w *sysWatcher) get(topic string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.values["$SYS/broker/"+topic]
	return v, ok
}

// number returns the value of topic as an integer, -1 while it has none.
func (w *sysWatcher) number(topic string) int {
	v, ok := w.get(topic)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// testSys: the broker publishes its figures under $SYS/broker/ every sys_interval, and
// they follow what happens: clients connected (a takeover counts once), messages and
// bytes, subscriptions, uptime, version.
func testSys(t *testing.T, e *env) {
	s := e.connect(t, clean("sys"))
	s.sub(t, 0, "$SYS/broker/#")
	w := &sysWatcher{values: map[string]string{}}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case m := <-s.inbox().ch:
				w.mu.Lock()
				w.values[m.Topic] = m.Payload
				w.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	for _, topic := range []string{"version", "uptime", "clients/connected", "clients/total",
		"messages/received", "messages/sent", "bytes/received", "bytes/sent", "subscriptions/count"} {
		testenv.WaitFor(t, "$SYS/broker/"+topic, func() bool { _, ok := w.get(topic); return ok })
	}
	if v, _ := w.get("version"); !strings.HasPrefix(v, "bifrost ") {
		t.Errorf("version %q", v)
	}
	if v, _ := w.get("uptime"); !regexp.MustCompile(`^\d+ seconds$`).MatchString(v) {
		t.Errorf("uptime %q", v)
	}

	pub := e.connect(t, clean("pub"))
	pub.sub(t, 1, "sys/a", "sys/b")
	testenv.WaitFor(t, "2 clients connected", func() bool { return w.number("clients/connected") == 2 })
	testenv.WaitFor(t, "3 subscriptions", func() bool { return w.number("subscriptions/count") == 3 })
	const n = 5
	for i := range n {
		pub.pub(t, "sys/a", 1, false, strconv.Itoa(i))
	}
	testenv.WaitFor(t, "messages received", func() bool { return w.number("messages/received") >= n })
	testenv.WaitFor(t, "messages sent", func() bool { return w.number("messages/sent") >= n })
	testenv.WaitFor(t, "bytes received", func() bool { return w.number("bytes/received") > n*10 })
	testenv.WaitFor(t, "bytes sent", func() bool { return w.number("bytes/sent") > n*10 })

	// A takeover replaces one connection by another: still three clients.
	first := e.connect(t, clean("twice"))
	testenv.WaitFor(t, "3 clients connected", func() bool { return w.number("clients/connected") == 3 })
	e.connect(t, clean("twice"))
	select {
	case <-first.lost():
	case <-timeout():
		t.Fatal("taken over client still connected")
	}
	testenv.WaitFor(t, "3 clients connected after a takeover", func() bool { return w.number("clients/connected") == 3 })
	pub.disconnect(t)
	testenv.WaitFor(t, "2 clients connected", func() bool { return w.number("clients/connected") == 2 })
	testenv.WaitFor(t, "1 subscription", func() bool { return w.number("subscriptions/count") == 1 })
}

// testEmbedding: the in-process API reaches MQTT clients and sees their messages:
// Broker.Publish delivers at the QoS asked and retains, Broker.Subscribe gets matching
// messages until cancelled; invalid topics and filters are refused.
func testEmbedding(t *testing.T, e *env) {
	type local struct{ topic, payload string }
	got := make(chan local, 64)
	cancel, err := e.b.Subscribe("emb/#", func(m bifrost.Message) {
		got <- local{m.Topic, string(m.Payload)}
	})
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan local, 64)
	if _, err := e.b.Subscribe("emb/+", func(m bifrost.Message) { second <- local{m.Topic, string(m.Payload)} }); err != nil {
		t.Fatal(err)
	}

	c := e.connect(t, clean("client"))
	c.sub(t, 2, "emb/#")
	c.pub(t, "emb/from-client", 1, false, "hello broker")
	for _, ch := range []chan local{got, second} {
		select {
		case l := <-ch:
			if l != (local{"emb/from-client", "hello broker"}) {
				t.Fatalf("in-process subscriber got %+v", l)
			}
		case <-timeout():
			t.Fatal("in-process subscriber got nothing")
		}
	}
	if m := c.inbox().next(t); m.Payload != "hello broker" {
		t.Fatalf("got %+v", m)
	}

	for q := range byte(3) {
		if err := e.b.Publish("emb/from-broker", []byte("hello client"), q, false); err != nil {
			t.Fatal(err)
		}
		if m := c.inbox().next(t); m.Topic != "emb/from-broker" || m.Payload != "hello client" || m.QoS != q {
			t.Fatalf("got %+v, want the broker's message at QoS %d", m, q)
		}
	}
	if err := e.b.Publish("emb/kept", []byte("retained"), 1, true); err != nil {
		t.Fatal(err)
	}
	late := e.connect(t, clean("late"))
	late.sub(t, 1, "emb/kept")
	if m := late.inbox().next(t); m.Payload != "retained" || !m.Retain {
		t.Fatalf("got %+v, want the retained message", m)
	}

	// Cancelled: the second subscription, called in the same delivery, proves that the
	// first would have been called by now.
	cancel()
	cancel() // idempotent
	for len(got) > 0 || len(second) > 0 {
		select {
		case <-got:
		case <-second:
		}
	}
	c.pub(t, "emb/x", 1, false, "after cancel")
	select {
	case <-second:
	case <-timeout():
		t.Fatal("remaining in-process subscriber got nothing")
	}
	select {
	case l := <-got:
		t.Fatalf("cancelled subscriber got %+v", l)
	default:
	}

	for _, topic := range []string{"emb/+", "emb/#", ""} {
		if err := e.b.Publish(topic, nil, 0, false); err == nil {
			t.Errorf("Publish to %q accepted", topic)
		}
	}
	if err := e.b.Publish("emb/t", nil, 3, false); err == nil {
		t.Error("Publish at QoS 3 accepted")
	}
	for _, filter := range []string{"emb/#/x", "emb+", ""} {
		if _, err := e.b.Subscribe(filter, func(bifrost.Message) {}); err == nil {
			t.Errorf("Subscribe to %q accepted", filter)
		}
	}
}

// testGracefulClose: Close disconnects every client (5.0 clients read DISCONNECT 0x8B,
// server shutting down, before a graceful close), publishes the wills a lost connection
// publishes, and stops accepting.
func testGracefulClose(t *testing.T, e *env) {
	var mu sync.Mutex
	wills := map[string]bool{}
	if _, err := e.b.Subscribe("gc/will/#", func(m bifrost.Message) {
		mu.Lock()
		wills[m.Topic] = true
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	o := clean("paho")
	o.will = &will{topic: "gc/will/paho", payload: "gone", qos: 1}
	c := e.connect(t, o)
	r := e.raw(t)
	r.session("raw", false, withWill("gc/will/raw", "gone", nil, nil))

	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if e.v5() {
		if rc := c.(*client5).serverDisconnect(t); rc != byte(packet.ServerShuttingDown) {
			t.Fatalf("paho got DISCONNECT %#x, want 0x8B", rc)
		}
		r.disconnectedWith(packet.ServerShuttingDown)
	} else {
		select {
		case <-c.lost():
		case <-timeout():
			t.Fatal("paho client still connected")
		}
		r.closed()
	}
	testenv.WaitFor(t, "both wills", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return wills["gc/will/paho"] && wills["gc/will/raw"]
	})
	addr := e.tcp
	if e.transport == conf.ListenerWS {
		addr = e.ws
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("the broker still accepts connections after Close")
	}
	if err := e.b.Publish("gc/t", nil, 0, false); err == nil {
		t.Error("Publish accepted after Close")
	}
}
