package broker

import (
	"fmt"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The fakeNode of cluster_owner_test.go applies retained changes nowhere, at once.
func (n *fakeNode) Retain(_ *session.Message, done func(bool)) {
	if done != nil {
		done(true)
	}
}

// fakeRetained is a cluster that keeps the retained changes handed to it until apply
// (or fail); its client ids are claimed in a fake cluster of one node
// (cluster_owner_test.go).
type fakeRetained struct {
	*fakeNode
	b     *Broker
	mu    sync.Mutex
	ops   []*session.Message
	dones []func(bool) // each op's; nil: none
}

func (f *fakeRetained) Retain(m *session.Message, done func(bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c session.Message
	c.BorrowForwarded(append([]byte(nil), m.Topic()...), append([]byte(nil), m.Payload()...), append([]byte(nil), m.Props()...), m.QoS, true, m.Expiry)
	f.ops = append(f.ops, c.Own())
	f.dones = append(f.dones, done)
}

// apply applies every change handed over, as the replicated log would, and tells each
// its done.
func (f *fakeRetained) apply() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.ops {
		if len(m.Payload()) == 0 {
			f.b.ApplyRetained(m.Topic(), nil)
		} else {
			f.b.ApplyRetained(m.Topic(), m)
		}
		if done := f.dones[i]; done != nil {
			done(true)
		}
	}
	f.ops, f.dones = f.ops[:0], f.dones[:0]
}

// fail gives up every change handed over, as a log that did not take them would.
func (f *fakeRetained) fail() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, done := range f.dones {
		if done != nil {
			done(false)
		}
	}
	f.ops, f.dones = f.ops[:0], f.dones[:0]
}

func (f *fakeRetained) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ops)
}

// retainedTopics returns the retained topics a new subscriber to filter gets.
func retainedTopics(t *testing.T, b *Broker, id, filter string) []string {
	t.Helper()
	c := &authTestConn{}
	b.OnOpen(c)
	in := connectPacket(packet.V5, id, "", "")
	in = (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter)}}}).AppendTo(in, packet.V5)
	b.OnData(c, in)
	var topics []string
	for _, p := range c.waitPackets(t, packet.V5, 2) {
		if p, ok := p.(*packet.Publish); ok {
			topics = append(topics, string(p.Topic))
		}
	}
	return topics
}

// TestClusterRetained: on a node of a cluster a retained PUBLISH changes nothing here
// until the cluster applies it, and its PUBACK waits for that; once applied, new
// subscribers get it; a clear (empty payload) goes the same way; $SYS stays local.
func TestClusterRetained(t *testing.T) {
	b := benchBroker(t)
	f := &fakeRetained{fakeNode: &fakeNode{c: newFakeCluster(), name: "a", serving: true}, b: b}
	b.cluster = f
	pub := &authTestConn{}
	b.OnOpen(pub)
	b.OnData(pub, connectPacket(packet.V5, "pub", "", ""))
	pub.waitPackets(t, packet.V5, 1)
	b.OnData(pub, (&packet.Publish{Topic: []byte("r/1"), QoS: 1, PacketID: 7, Retain: true, Payload: []byte("x")}).AppendTo(nil, packet.V5))
	if n := len(pub.packets(t, packet.V5)); n != 1 || f.pending() != 1 {
		t.Fatalf("before the cluster applied the change: %d packets, %d changes handed over; want the CONNACK alone, 1", n, f.pending())
	}
	if got := retainedTopics(t, b, "early", "r/#"); len(got) != 0 {
		t.Fatalf("a subscriber got %v before the cluster applied it", got)
	}
	f.apply()
	ps := pub.waitPackets(t, packet.V5, 2)
	if a, ok := ps[1].(*packet.Ack); !ok || a.PacketType != packet.PUBACK || a.PacketID != 7 {
		t.Fatalf("after apply: %v; want PUBACK 7", ps[1])
	}
	if got := retainedTopics(t, b, "s1", "r/#"); len(got) != 1 || got[0] != "r/1" {
		t.Fatalf("a subscriber after apply got %v; want r/1", got)
	}
	// A clear at QoS 0: handed over, applied, gone.
	b.OnData(pub, (&packet.Publish{Topic: []byte("r/1"), Retain: true}).AppendTo(nil, packet.V5))
	if f.pending() != 1 {
		t.Fatalf("%d changes handed over for the clear; want 1", f.pending())
	}
	f.apply()
	if got := retainedTopics(t, b, "s2", "r/#"); len(got) != 0 {
		t.Fatalf("after the clear a subscriber got %v", got)
	}
	// $SYS is the node's own.
	if err := b.Publish("$SYS/broker/x", []byte("1"), 0, true); err != nil {
		t.Fatal(err)
	}
	if f.pending() != 0 {
		t.Fatal("a $SYS topic went to the cluster")
	}
	if got := retainedTopics(t, b, "s3", "$SYS/broker/x"); len(got) != 1 {
		t.Fatalf("$SYS retained: %v", got)
	}
}

// TestClusterRetainedNotTaken: a retained change the cluster gives up (no leader in time,
// say) closes the publisher's connection without its PUBACK, whether the cluster says so
// after the PUBACK was encoded or before (at once, inside Retain); the retained set here
// is not changed.
func TestClusterRetainedNotTaken(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("Early=%v", early), func(t *testing.T) {
			b := benchBroker(t)
			late := &fakeRetained{fakeNode: &fakeNode{c: newFakeCluster(), name: "a", serving: true}, b: b}
			b.cluster = late
			if early {
				b.cluster = &refusingRetained{late}
			}
			pub := &authTestConn{}
			b.OnOpen(pub)
			b.OnData(pub, connectPacket(packet.V5, "pub", "", ""))
			pub.waitPackets(t, packet.V5, 1)
			b.OnData(pub, (&packet.Publish{Topic: []byte("r/1"), QoS: 1, PacketID: 7, Retain: true, Payload: []byte("x")}).AppendTo(nil, packet.V5))
			if !early {
				if pub.isClosed() {
					t.Fatal("the connection closed before the cluster gave the change up")
				}
				late.fail()
			}
			testenv.WaitFor(t, "the publisher's connection closed", pub.isClosed)
			if n := len(pub.packets(t, packet.V5)); n != 1 {
				t.Fatalf("%d packets; want the CONNACK alone: no PUBACK for a change not taken", n)
			}
			if got := retainedTopics(t, b, "s", "r/#"); len(got) != 0 {
				t.Fatalf("a subscriber got %v for a change not taken", got)
			}
		})
	}
}

// refusingRetained gives every retained change up at once, before Retain returns.
type refusingRetained struct{ *fakeRetained }

func (r *refusingRetained) Retain(_ *session.Message, done func(bool)) {
	if done != nil {
		done(false)
	}
}

// TestReplaceRetained: a snapshot's set replaces the node's retained messages, $SYS
// aside.
func TestReplaceRetained(t *testing.T) {
	b := benchBroker(t)
	for _, topic := range []string{"a", "b", "$SYS/x"} {
		if err := b.Publish(topic, []byte("v"), 0, true); err != nil {
			t.Fatal(err)
		}
	}
	c := session.NewLocalMessage("c", []byte("w"), 1, true)
	b.ReplaceRetained(func(yield func([]byte, *session.Message) bool) { yield(c.Topic(), c) })
	for topic, want := range map[string]bool{"a": false, "b": false, "c": true, "$SYS/x": true} {
		if _, ok := b.retained.tree.Get([]byte(topic)); ok != want {
			t.Errorf("topic %q retained %v; want %v", topic, ok, want)
		}
	}
}
