package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/paho"
)

// TestOneSidedDeath: n2 declares n1 dead and back while n1 never noticed (a partition
// that heals between the two sides' failure detections, or a death gossiped to a node
// that could reach n1 all along). n2 drops n1's routes and ends its forward link; n1's
// route stream to n2 must start again with a snapshot although n1 has no change to send,
// and n2's new forward link must number its messages past the old one's, which n1 still
// de-duplicates against: a message published on n2 afterwards reaches n1's subscriber.
// test/cluster TestHealRoutes is the same with processes and a real partition.
func TestOneSidedDeath(t *testing.T) {
	ns := startBrokers(t, 2)
	sub := mqtttest.Dial(t, ns[0].addr, "sub")
	sub.Sub(t, 1, "o/#", "end")
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	round := func(when string) {
		t.Helper()
		for i := range 3 {
			pub.Pub(t, &paho.Publish{Topic: "o/t", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
		}
		pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
		if msgs := sub.Until(t, "end"); len(msgs) != 3 {
			t.Fatalf("%s: the subscriber on n1 got %d of 3 messages published on n2", when, len(msgs))
		}
	}
	round("before")
	n2 := ns[1]
	old := n2.fwd.linkOf("n1")
	n2.routes.gone("n1") // memberlist's NotifyLeave, as n2 declares n1 dead
	n2.fwd.gone("n1")    // the routes goroutine's sync, as n1 is not live
	testenv.WaitFor(t, "n2 to hold n1's two routes again, and a new forward link to it", func() bool {
		l := n2.fwd.linkOf("n1")
		return n2.routes.peerRoutes()["n1"] == 2 && l != nil && l != old
	})
	round("after n2 declared n1 dead and back")
}

// TestForwardAcrossCut: QoS 1 messages forwarded between two followers survive a cut of
// the link between them. The first has reached the receiving node when the cut comes,
// which delivers it once the cut has closed the stream, so that its acknowledgement is
// lost; the second is published during the cut. No PUBACK comes while the link is cut,
// and the two nodes do not declare each other dead (the leader, which both reach,
// answers memberlist's indirect probes). Healed, the sending node's next stream resends
// the first, which the receiver skips as delivered, and sends the second: the subscriber
// gets each once, in order, and both PUBACKs come. test/cluster TestHealRoutes checks
// forwarding after cuts with processes.
func TestForwardAcrossCut(t *testing.T) {
	lab := newMemNet()
	ns := startBrokersOn(t, lab, 3)
	_, leader := waitFormed(t, ns[0].testNode, ns[1].testNode, ns[2].testNode)
	var followers []*brokerNode
	for _, n := range ns {
		if n.name != leader {
			followers = append(followers, n)
		}
	}
	a, b := followers[0], followers[1]
	sub := mqtttest.Dial(t, a.addr, "sub")
	sub.Sub(t, 1, "c/#", "end")
	h := holdHost(a)
	pub := mqtttest.Dial(t, b.addr, "pub")
	acked := make(chan string, 2)
	publish := func(payload string) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
			defer cancel()
			if _, err := pub.Paho.Publish(ctx, &paho.Publish{Topic: "c/t", QoS: 1, Payload: []byte(payload)}); err != nil {
				payload += ": " + err.Error()
			}
			acked <- payload
		}()
	}
	publish("1")
	select {
	case <-h.entered:
	case <-time.After(testenv.Timeout):
		t.Fatalf("the first message did not reach %s", a.name)
	}
	lab.partition([]string{a.name}, []string{b.name})
	cut := time.Now()
	publish("2")
	l := b.fwd.linkOf(a.name)
	testenv.WaitFor(t, "the second message queued for "+a.name+" behind the first", func() bool { return l.depth() == 2 })
	close(h.open)
	if g := sub.Next(t); g.Payload != "1" {
		t.Fatalf("the subscriber on %s got %+v; want the first message, delivered as the cut came", a.name, g)
	}
	// The nodes dial each other again (gRPC, the route and forward streams), refused.
	refused := lab.refusedAtCuts()
	testenv.WaitFor(t, "a dial across the cut refused", func() bool { return lab.refusedAtCuts() > refused })
	select {
	case p := <-acked:
		t.Fatalf("PUBACK of message %s while the link is cut", p)
	default:
	}

	lab.heal()
	got := map[string]bool{}
	for range 2 {
		select {
		case p := <-acked:
			got[p] = true
		case <-time.After(testenv.Timeout):
			t.Fatalf("healed, the publisher has PUBACKs of %v; want both", got)
		}
	}
	t.Logf("both PUBACKs %v after the cut", time.Since(cut).Round(time.Millisecond))
	if !got["1"] || !got["2"] {
		t.Errorf("PUBACKs %v; want of 1 and 2", got)
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	var payloads []string
	for _, g := range sub.Until(t, "end") {
		payloads = append(payloads, g.Payload)
	}
	if !slices.Equal(payloads, []string{"2"}) {
		t.Errorf("healed, the subscriber got %v after the first; want [2]", payloads)
	}
	if a.fwd.resent.Load() == 0 {
		t.Error("nothing was resent: the first message's acknowledgement was not lost")
	}
}
