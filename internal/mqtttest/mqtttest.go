// Package mqtttest is an MQTT 5 client for tests (Eclipse paho.golang) that keeps what it
// receives in order, so that a test can publish on one broker and read on another.
package mqtttest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// A Msg is a message as the client received it.
type Msg struct {
	Topic, Payload string
	QoS            byte
	Retain         bool
	Props          *paho.PublishProperties
}

// A Client is a connected paho.golang client; In holds what it received, in order.
type Client struct {
	Paho *paho.Client
	In   chan Msg
}

// Dial connects a clean-start client with the ID id to the broker at addr (TCP) and
// disconnects it when the test ends.
func Dial(t testing.TB, addr, id string) *Client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return Open(t, nc, id)
}

// Open is Dial over nc, a connection the caller opened (another network namespace's,
// for one).
func Open(t testing.TB, nc net.Conn, id string) *Client {
	t.Helper()
	m := &Client{In: make(chan Msg, 1<<14)}
	m.Paho = paho.NewClient(paho.ClientConfig{
		ClientID: id,
		Conn:     packets.NewThreadSafeConn(nc),
		// A SUBACK may wait up to the cluster's route timeout (10 s), paho's default:
		// the test's bound is testenv.Timeout.
		PacketTimeout: testenv.Timeout,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			p := pr.Packet
			m.In <- Msg{Topic: p.Topic, Payload: string(p.Payload), QoS: p.QoS, Retain: p.Retain, Props: p.Properties}
			return true, nil
		}},
		OnClientError: func(error) {},
	})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if _, err := m.Paho.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatalf("connect %s to %s: %v", id, nc.RemoteAddr(), err)
	}
	t.Cleanup(func() { _ = m.Paho.Disconnect(&paho.Disconnect{}) })
	return m
}

// Sub subscribes to filters at qos with Retain As Published, so that a test sees the
// retain flag as the publisher set it.
func (m *Client) Sub(t testing.TB, qos byte, filters ...string) {
	t.Helper()
	s := &paho.Subscribe{}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{Topic: f, QoS: qos, RetainAsPublished: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if _, err := m.Paho.Subscribe(ctx, s); err != nil {
		t.Fatalf("subscribe %v: %v", filters, err)
	}
}

// Unsub unsubscribes from filters and waits for the UNSUBACK.
func (m *Client) Unsub(t testing.TB, filters ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if _, err := m.Paho.Unsubscribe(ctx, &paho.Unsubscribe{Topics: filters}); err != nil {
		t.Fatalf("unsubscribe %v: %v", filters, err)
	}
}

// Pub publishes p and waits for its acknowledgement (none at QoS 0).
func (m *Client) Pub(t testing.TB, p *paho.Publish) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if _, err := m.Paho.Publish(ctx, p); err != nil {
		t.Fatalf("publish %s: %v", p.Topic, err)
	}
}

// Next returns the next message, failing the test if none comes in time.
func (m *Client) Next(t testing.TB) Msg {
	t.Helper()
	return m.NextOr(t, func() {})
}

// NextOr is Next that calls explain (to log what the test knows of why) before it fails.
func (m *Client) NextOr(t testing.TB, explain func()) Msg {
	t.Helper()
	select {
	case g := <-m.In:
		return g
	case <-time.After(testenv.Timeout):
		explain()
		t.Fatal("no message came")
	}
	return Msg{}
}

// Until returns what arrived before the first message on marker.
func (m *Client) Until(t testing.TB, marker string) []Msg {
	t.Helper()
	var out []Msg
	for {
		g := m.Next(t)
		if g.Topic == marker {
			return out
		}
		out = append(out, g)
	}
}
