package interop

import (
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// client3 is an MQTT 3.1.1 client: Eclipse paho.mqtt.golang, which dials tcp:// and ws://
// URLs itself.
type client3 struct {
	c              mqtt.Client
	in             *inbox
	lostCh         chan struct{}
	sessionPresent bool // the CONNACK's session present flag
}

// dial3 connects a paho.mqtt.golang client; on refusal, code is the CONNACK return code.
func (e *env) dial3(t testing.TB, o opts) (c3 *client3, code byte, err error) {
	t.Helper()
	c := &client3{in: newInbox(), lostCh: make(chan struct{})}
	url := "tcp://" + e.tcp
	if e.transport == conf.ListenerWS {
		url = "ws://" + e.ws + "/mqtt"
	}
	ka := time.Duration(o.keepAlive) * time.Second
	if ka == 0 {
		ka = 30 * time.Second
	}
	co := mqtt.NewClientOptions().AddBroker(url).SetClientID(o.id).SetCleanSession(o.clean).
		SetProtocolVersion(4).SetKeepAlive(ka).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(testenv.Timeout).SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) {
			c.in.put(msg{Topic: m.Topic(), Payload: string(m.Payload()), QoS: m.Qos(), Retain: m.Retained(), Dup: m.Duplicate()})
		}).
		SetConnectionLostHandler(func(mqtt.Client, error) { close(c.lostCh) })
	if w := o.will; w != nil {
		co.SetBinaryWill(w.topic, []byte(w.payload), w.qos, w.retain)
	}
	if o.user != "" {
		co.SetUsername(o.user).SetPassword(o.password)
	}
	c.c = mqtt.NewClient(co)
	tok := c.c.Connect().(*mqtt.ConnectToken)
	if !tok.WaitTimeout(testenv.Timeout) {
		t.Fatal("connect: timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, tok.ReturnCode(), err
	}
	c.sessionPresent = tok.SessionPresent()
	t.Cleanup(func() { c.c.Disconnect(100) })
	return c, 0, nil
}

// connect3 is dial3 for a connection that must be accepted.
func (e *env) connect3(t testing.TB, o opts) *client3 {
	t.Helper()
	c, _, err := e.dial3(t, o)
	if err != nil {
		t.Fatalf("connect %q: %v", o.id, err)
	}
	return c
}

func wait(t testing.TB, what string, tok mqtt.Token) {
	t.Helper()
	if !tok.WaitTimeout(testenv.Timeout) {
		t.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (c *client3) pub(t testing.TB, topic string, qos byte, retain bool, payload string) {
	t.Helper()
	wait(t, "publish "+topic, c.c.Publish(topic, qos, retain, []byte(payload)))
}

func (c *client3) sub(t testing.TB, qos byte, filters ...string) {
	t.Helper()
	m := make(map[string]byte, len(filters))
	for _, f := range filters {
		m[f] = qos
	}
	tok := c.c.SubscribeMultiple(m, nil)
	wait(t, "subscribe", tok)
	for f, g := range tok.(*mqtt.SubscribeToken).Result() {
		if g >= 0x80 {
			t.Fatalf("subscribe %q refused: %#x", f, g)
		}
	}
}

func (c *client3) unsub(t testing.TB, filters ...string) {
	t.Helper()
	wait(t, "unsubscribe", c.c.Unsubscribe(filters...))
}

// disconnect waits (up to 5s, returning as soon as it is written) for the DISCONNECT to be
// sent: with a quiesce of 0, paho.mqtt.golang may close the socket before it is.
func (c *client3) disconnect(t testing.TB) {
	t.Helper()
	c.c.Disconnect(5000)
}

func (c *client3) inbox() *inbox { return c.in }

func (c *client3) lost() <-chan struct{} { return c.lostCh }

func (c *client3) present() bool { return c.sessionPresent }
