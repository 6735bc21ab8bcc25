package cluster

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/paho"
)

// Publish anywhere, receive anywhere, between bifrost processes, with MQTT 5 clients
// (paho.golang): QoS 0/1/2 across nodes, wildcard and $share filters, v5 properties and
// order through the hop, SUBACK means routed, and a node killed with SIGKILL.

// dialMQTT connects an MQTT 5 client to nd.
func dialMQTT(t testing.TB, nd *node, id string) *mqtttest.Client {
	t.Helper()
	return mqtttest.Dial(t, nd.mqttAddr(), id)
}

// threeNodes starts a formed cluster of three processes.
func threeNodes(t *testing.T) *testCluster {
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	return c
}

// TestPublishAnywhere: QoS 0, 1 and 2 published on one node reach exact and wildcard
// subscribers on the others, once each, in order, with the v5 properties, the remaining
// message expiry and the retain flag; a shared group with members on two nodes gets
// each message once.
func TestPublishAnywhere(t *testing.T) {
	c := threeNodes(t)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	exact := dialMQTT(t, n1, "exact")
	wild := dialMQTT(t, n3, "wild")
	s1 := dialMQTT(t, n1, "s1")
	s3 := dialMQTT(t, n3, "s3")
	exact.Sub(t, 2, "a/b/c", "end")
	wild.Sub(t, 2, "a/+/#", "end")
	s1.Sub(t, 2, "$share/g/a/#", "end")
	s3.Sub(t, 2, "$share/g/a/#", "end")
	pub := dialMQTT(t, n2, "pub")
	const n = 90
	for i := range n {
		qos := byte(i % 3)
		pub.Pub(t, &paho.Publish{Topic: "a/b/c", QoS: qos, Retain: i == 1, Payload: fmt.Appendf(nil, "%d", i),
			Properties: &paho.PublishProperties{ContentType: "ct", ResponseTopic: "r/t", CorrelationData: []byte("cd"),
				MessageExpiry: new(uint32(60)), User: paho.UserProperties{{Key: "k", Value: fmt.Sprint(i)}}}})
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	for name, cl := range map[string]*mqtttest.Client{"exact": exact, "wild": wild} {
		msgs := cl.Until(t, "end")
		if len(msgs) != n {
			t.Fatalf("%s: %d messages, want %d", name, len(msgs), n)
		}
		for i, g := range msgs {
			pr := g.Props
			if g.Payload != fmt.Sprint(i) || g.QoS != byte(i%3) || g.Retain != (i == 1) || pr == nil ||
				pr.ContentType != "ct" || pr.ResponseTopic != "r/t" || string(pr.CorrelationData) != "cd" ||
				pr.User.Get("k") != fmt.Sprint(i) || pr.MessageExpiry == nil || *pr.MessageExpiry > 60 || *pr.MessageExpiry == 0 {
				t.Fatalf("%s: message %d: %+v %+v", name, i, g, pr)
			}
		}
	}
	seen := map[string]int{}
	for _, cl := range []*mqtttest.Client{s1, s3} {
		for _, g := range cl.Until(t, "end") {
			seen[g.Payload]++
		}
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("shared: message %d delivered %d times", i, seen[fmt.Sprint(i)])
		}
	}
	// The publisher's node counts what it forwarded to each peer: every message and the
	// marker crossed to n1 and n3 (their direct subscribers), once per node.
	for _, peer := range []string{"n1", "n3"} {
		if v, ok := n2.metric(fmt.Sprintf(`bifrost_cluster_forwarded_messages_total{peer=%q}`, peer)); !ok || v < n+1 {
			t.Errorf("n2 reports %v messages forwarded to %s (found %v), want at least %d", v, peer, ok, n+1)
		}
	}
}

// TestSubackMeansRoutedProcesses: a client that has its SUBACK on one node gets a
// message published on another right after, round after round.
func TestSubackMeansRoutedProcesses(t *testing.T) {
	c := threeNodes(t)
	pub := dialMQTT(t, c.node("n2"), "pub")
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	for i := range rounds {
		nd := c.nodes[i%2*2]
		sub := dialMQTT(t, nd, fmt.Sprintf("s%d", i))
		topic := fmt.Sprintf("r/%d", i)
		sub.Sub(t, 1, topic)
		pub.Pub(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})
		g := sub.NextOr(t, func() { t.Logf("round %d: subscribed on %s, published on n2", i, nd.name) })
		if g.Topic != topic {
			t.Fatalf("round %d: got %q", i, g.Topic)
		}
		_ = sub.Paho.Disconnect(&paho.Disconnect{})
	}
}

// TestKilledNodeRoutes: a node killed with SIGKILL has its routes dropped by the others
// once failure detection declares it dead, while QoS 1 between the survivors goes on.
func TestKilledNodeRoutes(t *testing.T) {
	c := threeNodes(t)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	victim := dialMQTT(t, n3, "victim")
	victim.Sub(t, 1, "k/#", "v/1", "v/2")
	for _, nd := range []*node{n1, n2} {
		testenv.WaitFor(t, nd.name+" to hold n3's routes", func() bool {
			v, ok := nd.metric(`bifrost_cluster_routes{peer="n3"}`)
			return ok && v == 3
		})
	}
	sub := dialMQTT(t, n1, "sub")
	sub.Sub(t, 1, "k/#", "end")
	pub := dialMQTT(t, n2, "pub")
	n3.kill()
	const n = 200
	for i := range n {
		pub.Pub(t, &paho.Publish{Topic: "k/t", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	if msgs := sub.Until(t, "end"); len(msgs) != n {
		t.Fatalf("the survivor's subscriber got %d of %d", len(msgs), n)
	}
	for _, nd := range []*node{n1, n2} {
		testenv.WaitFor(t, nd.name+" to drop n3's routes", func() bool {
			_, ok := nd.metric(`bifrost_cluster_routes{peer="n3"}`)
			return !ok
		})
	}
	// n3 comes back on its data directory: its routes come back by snapshot (none: the
	// victim's session was clean).
	n3.start()
	c.waitFormed() // n3 serves once it holds the lease again
	back := dialMQTT(t, n3, "back")
	back.Sub(t, 1, "b/1")
	pub.Pub(t, &paho.Publish{Topic: "b/1", QoS: 1, Payload: []byte("again")})
	if g := back.Next(t); g.Payload != "again" {
		t.Fatalf("got %+v", g)
	}
}
