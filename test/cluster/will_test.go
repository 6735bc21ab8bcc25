package cluster

import (
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/eclipse/paho.golang/paho"
)

// TestWillsAcrossNodes: the will of a client whose connection breaks on one node reaches
// subscribers on every node; a will with a delay is cancelled when the client id
// reconnects on another node within the delay (the hand-over carries the pending will),
// and is not published there later either.
func TestWillsAcrossNodes(t *testing.T) {
	c, _ := servingCluster(t, nil)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	subs := []*mqtttest.Client{mqtttest.Dial(t, n2.mqttAddr(), "w2"), mqtttest.Dial(t, n3.mqttAddr(), "w3")}
	for _, s := range subs {
		s.Sub(t, 1, "will/#", "end")
	}

	// A will without delay: the connection breaks, every node's subscriber gets it.
	dying := mqtttest.DialRaw(t, n1.mqttAddr())
	will := &packet.Connect{ClientID: []byte("dying"), CleanStart: true, WillFlag: true, WillQoS: 1,
		WillTopic: []byte("will/dying"), WillPayload: []byte("gone")}
	if ack, err := dying.Connect(will); err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNACK %+v %v", ack, err)
	}
	_ = dying.Conn.Close()
	for _, s := range subs {
		if m := s.Next(t); m.Topic != "will/dying" || m.Payload != "gone" || m.QoS != 1 {
			t.Fatalf("got %+v, want the will", m)
		}
	}

	// A will with a delay: the client id reconnects on n2 within it, so the will is
	// never published, on n1 or on n2.
	const delay = 2
	sleeper := mqtttest.DialRaw(t, n1.mqttAddr())
	p := persistent("sleeper")
	p.WillFlag, p.WillQoS, p.WillTopic, p.WillPayload = true, 1, []byte("will/sleeper"), []byte("late")
	p.WillProps.WillDelay = packet.Some[uint32](delay)
	if ack, err := sleeper.Connect(p); err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNACK %+v %v", ack, err)
	}
	_ = sleeper.Conn.Close()
	back := mqtttest.DialRaw(t, n2.mqttAddr())
	if ack, err := back.Connect(persistent("sleeper")); err != nil || ack.Code != packet.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on n2 %+v %v; want session present", ack, err)
	}
	// The scenario is the delay running out: nothing marks that moment but the clock.
	time.Sleep(2 * delay * time.Second)
	subs[0].Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	for _, s := range subs {
		if got := s.Until(t, "end"); len(got) != 0 {
			t.Fatalf("a will that a reconnect cancelled was published: %+v", got)
		}
	}
}
