package cluster

import (
	"fmt"
	"testing"

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
