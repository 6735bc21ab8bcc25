package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// An MQTT 5 client for the retained tests (Eclipse paho.golang).

// retMsg is a retained message as a new subscriber gets it.
type retMsg struct {
	Payload     string
	QoS         byte
	ContentType string
	User        string // the first user property, "key=value"
	Expiry      uint32 // the message expiry interval left; 0: none
}

// retClient is one connected client.
type retClient struct {
	c  *paho.Client
	mu sync.Mutex
	in []*paho.Publish
	ch chan struct{} // a message arrived
}

var retIDs atomic.Uint64

// retDial connects a clean MQTT 5 client to nd; the test disconnects it at its end.
func retDial(t testing.TB, nd *node) *retClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", nd.mqttAddr(), testenv.Timeout)
	if err != nil {
		t.Fatalf("%s: %v", nd.name, err)
	}
	c := &retClient{ch: make(chan struct{}, 1)}
	id := fmt.Sprintf("ret-%s-%d", nd.name, retIDs.Add(1))
	c.c = paho.NewClient(paho.ClientConfig{
		ClientID: id,
		Conn:     packets.NewThreadSafeConn(conn),
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.mu.Lock()
			c.in = append(c.in, pr.Packet)
			c.mu.Unlock()
			select {
			case c.ch <- struct{}{}:
			default:
			}
			return true, nil
		}},
		OnClientError: func(error) {},
	})
	ctx, cancel := retCtx()
	defer cancel()
	if _, err := c.c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 60}); err != nil {
		_ = conn.Close()
		t.Fatalf("connect to %s: %v", nd.name, err)
	}
	t.Cleanup(func() {
		_ = c.c.Disconnect(&paho.Disconnect{})
		<-c.c.Done()
	})
	return c
}

func retCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), testenv.Timeout)
}

// publish sends a PUBLISH and, for QoS 1 and 2, waits for its acknowledgement.
func (c *retClient) publish(t testing.TB, p *paho.Publish) {
	t.Helper()
	ctx, cancel := retCtx()
	defer cancel()
	if _, err := c.c.Publish(ctx, p); err != nil {
		t.Fatalf("publish %q: %v", p.Topic, err)
	}
}

// retained subscribes to filter and returns the retained messages the node sends for
// it: those that come before marker, a topic matching filter that this client publishes
// (not retained) once its SUBACK is in: the node sends a new subscriber's retained
// messages right after its SUBACK, and a session's messages in order.
func (c *retClient) retained(t testing.TB, filter, marker string) map[string]retMsg {
	t.Helper()
	ctx, cancel := retCtx()
	defer cancel()
	if _, err := c.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatalf("subscribe %q: %v", filter, err)
	}
	tag := fmt.Sprintf("marker-%d", retIDs.Add(1))
	c.publish(t, &paho.Publish{Topic: marker, QoS: 1, Payload: []byte(tag)})
	got := map[string]retMsg{}
	deadline := time.After(testenv.Timeout)
	for {
		c.mu.Lock()
		in := c.in
		c.in = nil
		c.mu.Unlock()
		for _, p := range in {
			if !p.Retain {
				if string(p.Payload) == tag {
					return got
				}
				continue // a live message, someone else's marker
			}
			m := retMsg{Payload: string(p.Payload), QoS: p.QoS}
			if pr := p.Properties; pr != nil {
				m.ContentType = pr.ContentType
				if len(pr.User) > 0 {
					m.User = pr.User[0].Key + "=" + pr.User[0].Value
				}
				if pr.MessageExpiry != nil {
					m.Expiry = *pr.MessageExpiry
				}
			}
			got[p.Topic] = m
		}
		select {
		case <-c.ch:
		case <-deadline:
			t.Fatalf("no marker after subscribing to %q (got %d retained)", filter, len(got))
		}
	}
}

// retainedOn is what a new subscriber to filter on nd gets.
func retainedOn(t testing.TB, nd *node, filter, marker string) map[string]retMsg {
	t.Helper()
	c := retDial(t, nd)
	got := c.retained(t, filter, marker)
	_ = c.c.Disconnect(&paho.Disconnect{})
	return got
}
