package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// Publish anywhere, receive anywhere, in one process: every node a Cluster and a Broker
// with a TCP listener on loopback, real MQTT 5 clients (paho.golang). test/cluster runs
// the scenarios that need a process to die.

type brokerNode struct {
	*testNode
	b    *broker.Broker
	addr string
}

// startBrokers starts n nodes, each a Cluster with its Broker, and waits until each sees
// the others alive.
func startBrokers(t *testing.T, n int) []*brokerNode {
	t.Helper()
	return startBrokersOn(t, nil, n)
}

// startBrokersOn is startBrokers with the clusters on lab; nil: loopback. The brokers'
// MQTT listeners are on loopback.
func startBrokersOn(t *testing.T, lab *memNet, n int) []*brokerNode {
	t.Helper()
	var out []*brokerNode
	var seed string
	for i := range n {
		var seeds []string
		if seed != "" {
			seeds = []string{seed}
		}
		name := fmt.Sprintf("n%d", i+1)
		tn := startNodeOn(t, lab.node(name), nodeConfig(t, name, n, seeds...))
		if seed == "" {
			seed = tn.gossip()
		}
		cfg := conf.Default()
		cfg.Listeners = []conf.Listener{{Type: "tcp", Address: "127.0.0.1:0"}}
		cfg.SysInterval = new(conf.Duration)
		cfg.EnsureDefaults()
		b, err := broker.New(broker.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler), Cluster: tn.Cluster})
		if err != nil {
			t.Fatal(err)
		}
		tn.Attach(b)
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		out = append(out, &brokerNode{testNode: tn, b: b, addr: b.Listeners()[0].Addr().String()})
	}
	waitMesh(t, out...)
	return out
}

// waitMesh waits until every node sees the others alive, streams routes to them, and
// serves clients (it holds the lease).
func waitMesh(t *testing.T, nodes ...*brokerNode) {
	t.Helper()
	testenv.WaitFor(t, "every node to see the others and serve", func() bool {
		for _, n := range nodes {
			if ok, _ := n.Serving(); !ok || len(n.livePeers()) != len(nodes)-1 {
				return false
			}
		}
		return true
	})
}

// TestForwardAcrossNodes: a message published on one node reaches the subscribers of
// the others once per subscriber at every QoS, exact and wildcard, with the v5
// properties, the remaining expiry and the retain flag (Retain As Published), and a node
// with many subscribers gets it once.
func TestForwardAcrossNodes(t *testing.T) {
	ns := startBrokers(t, 3)
	a1 := mqtttest.Dial(t, ns[0].addr, "a1")
	a2 := mqtttest.Dial(t, ns[0].addr, "a2")
	c1 := mqtttest.Dial(t, ns[2].addr, "c1")
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	a1.Sub(t, 2, "x/+/v")
	a2.Sub(t, 2, "x/#")
	c1.Sub(t, 2, "x/1/v", "end")
	a1.Sub(t, 2, "end")
	a2.Sub(t, 2, "end")

	for qos := byte(0); qos <= 2; qos++ {
		p := &paho.Publish{Topic: "x/1/v", QoS: qos, Retain: qos == 1, Payload: fmt.Appendf(nil, "q%d", qos),
			Properties: &paho.PublishProperties{ContentType: "text/plain", ResponseTopic: "r/1", CorrelationData: []byte{1, 2},
				PayloadFormat: new(byte), MessageExpiry: new(uint32(100)),
				User: paho.UserProperties{{Key: "k", Value: "v"}}}}
		*p.Properties.PayloadFormat = 1
		pub.Pub(t, p)
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	for _, c := range []*mqtttest.Client{a1, a2, c1} {
		msgs := c.Until(t, "end")
		if len(msgs) != 3 {
			t.Fatalf("%d messages, want 3: %+v", len(msgs), msgs)
		}
		for i, g := range msgs {
			if g.Payload != fmt.Sprintf("q%d", i) || g.QoS != byte(i) || g.Retain != (i == 1) {
				t.Errorf("message %d: %+v", i, g)
			}
			pr := g.Props
			if pr == nil || pr.ContentType != "text/plain" || pr.ResponseTopic != "r/1" || string(pr.CorrelationData) != "\x01\x02" ||
				pr.PayloadFormat == nil || *pr.PayloadFormat != 1 || pr.User.Get("k") != "v" ||
				pr.MessageExpiry == nil || *pr.MessageExpiry == 0 || *pr.MessageExpiry > 100 {
				t.Errorf("message %d: properties %+v", i, pr)
			}
		}
	}
	// A node with two matching subscribers got each message once.
	if got := ns[1].fwd.linkOf("n1").msgs.Load(); got != 4 {
		t.Errorf("n2 forwarded %d messages to n1, want 4 (3 and the marker)", got)
	}
}

// TestSubackMeansRouted: once a client has its SUBACK on one node, a message published
// on another right away reaches it, round after round.
func TestSubackMeansRouted(t *testing.T) {
	ns := startBrokers(t, 3)
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	rounds := 200
	if testing.Short() {
		rounds = 50
	}
	for i := range rounds {
		sub := mqtttest.Dial(t, ns[i%2*2].addr, fmt.Sprintf("s%d", i))
		topic := fmt.Sprintf("r/%d", i)
		sub.Sub(t, 1, topic)
		pub.Pub(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})
		g := sub.NextOr(t, func() {
			for _, n := range ns {
				var m pubsub.Matches
				t.Logf("%s: routes %v, nodes for %s: %v", n.name, n.routes.peerRoutes(), topic, n.routes.matchNodes([]byte(topic), &m, nil))
			}
			t.Logf("round %d: published on n2, subscribed on %s", i, ns[i%2*2].name)
		})
		if g.Topic != topic {
			t.Fatalf("round %d: got %q", i, g.Topic)
		}
		_ = sub.Paho.Disconnect(&paho.Disconnect{})
	}
}

// TestOrderPerPublisher: QoS 0, 1 and 2 messages of one publisher arrive on another node
// in the order sent.
func TestOrderPerPublisher(t *testing.T) {
	ns := startBrokers(t, 2)
	sub := mqtttest.Dial(t, ns[0].addr, "sub")
	sub.Sub(t, 2, "o/#", "end")
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	const n = 600
	var wg sync.WaitGroup
	for i := range n {
		p := &paho.Publish{Topic: "o/t", QoS: byte(i % 3), Payload: fmt.Appendf(nil, "%d", i)}
		if p.QoS == 0 {
			pub.Pub(t, p)
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); pub.Pub(t, p) }()
		// paho sends in call order only while calls do not overlap.
		wg.Wait()
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	msgs := sub.Until(t, "end")
	if len(msgs) != n {
		t.Fatalf("%d messages, want %d", len(msgs), n)
	}
	for i, g := range msgs {
		if g.Payload != fmt.Sprint(i) {
			t.Fatalf("message %d is %s", i, g.Payload)
		}
	}
}

// TestSharedAcrossNodes: a shared group with members on two nodes gets each message once
// cluster-wide; with a member on the publisher's node, that member gets them all.
func TestSharedAcrossNodes(t *testing.T) {
	ns := startBrokers(t, 3)
	m1 := mqtttest.Dial(t, ns[0].addr, "m1")
	m3 := mqtttest.Dial(t, ns[2].addr, "m3")
	for _, m := range []*mqtttest.Client{m1, m3} {
		m.Sub(t, 1, "$share/g/s/#", "end")
	}
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	const n = 40
	for i := range n {
		pub.Pub(t, &paho.Publish{Topic: "s/t", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	seen := map[string]int{}
	per := map[string]int{}
	for name, m := range map[string]*mqtttest.Client{"m1": m1, "m3": m3} {
		for _, g := range m.Until(t, "end") {
			seen[g.Payload]++
			per[name]++
		}
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("message %d delivered %d times", i, seen[fmt.Sprint(i)])
		}
	}
	if per["m1"] == 0 || per["m3"] == 0 {
		t.Errorf("not spread over the nodes: %v", per)
	}

	// A local member first.
	m2 := mqtttest.Dial(t, ns[1].addr, "m2")
	m2.Sub(t, 1, "$share/g/s/#", "end")
	for i := range n {
		pub.Pub(t, &paho.Publish{Topic: "s/t", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	if got := m2.Until(t, "end"); len(got) != n {
		t.Errorf("the member on the publisher's node got %d of %d", len(got), n)
	}
	for _, m := range []*mqtttest.Client{m1, m3} {
		if got := m.Until(t, "end"); len(got) != 0 {
			t.Errorf("a remote member got %d with a local member online", len(got))
		}
	}
}

// TestSharedNoneOnline: a node whose members are all offline answers none online, and
// the message goes to the member online on another node.
func TestSharedNoneOnline(t *testing.T) {
	ns := startBrokers(t, 3)
	// An offline member on n1: a persistent session, disconnected.
	nc, err := net.Dial("tcp", ns[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	off := paho.NewClient(paho.ClientConfig{ClientID: "off", Conn: packets.NewThreadSafeConn(nc), OnClientError: func(error) {}})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if _, err := off.Connect(ctx, &paho.Connect{ClientID: "off", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: new(uint32(600))}}); err != nil {
		t.Fatal(err)
	}
	if _, err := off.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/g/s/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	_ = off.Disconnect(&paho.Disconnect{})
	m3 := mqtttest.Dial(t, ns[2].addr, "m3")
	m3.Sub(t, 1, "$share/g/s/#", "end")
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	const n = 20
	for i := range n {
		pub.Pub(t, &paho.Publish{Topic: "s/t", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
	}
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
	if got := m3.Until(t, "end"); len(got) != n {
		t.Errorf("the online member got %d of %d", len(got), n)
	}
}

// TestDeadPeerRoutesDropped: a node that fails (its gossip stops without leaving) has
// its routes dropped by the others once failure detection declares it dead.
func TestDeadPeerRoutesDropped(t *testing.T) {
	ns := startBrokers(t, 3)
	c := mqtttest.Dial(t, ns[2].addr, "c")
	c.Sub(t, 1, "d/1", "d/2")
	for _, n := range ns[:2] {
		if got := n.routes.peerRoutes()["n3"]; got != 2 {
			t.Fatalf("%s holds %d routes of n3, want 2", n.name, got)
		}
	}
	ns[2].fail()
	for _, n := range ns[:2] {
		testenv.WaitFor(t, n.name+" to drop the routes of n3", func() bool {
			var m pubsub.Matches
			nodes := n.routes.matchNodes([]byte("d/1"), &m, nil)
			_, ok := n.routes.peerRoutes()["n3"]
			return !ok && len(nodes) == 0
		})
	}
}

// fail stops n as a crash would: gossip, Raft and the rpc port stop without a word (no
// leave); Close does nothing afterwards.
func (n *testNode) fail() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	_ = n.ms.ml.Shutdown()
	n.grpc.Stop()
	n.peers.close()
	_ = n.raft.Shutdown().Error()
	_ = n.trans.Close()
	_ = n.mux.close()
	n.wg.Wait()
	_ = n.stores.close()
}

// heldHost stands between a node's cluster and its broker: the first batch of
// forwarded messages waits at the door until the test opens it.
type heldHost struct {
	broker.ClusterHost
	entered chan struct{} // closed when the first batch arrives
	open    chan struct{} // closed by the test
	once    sync.Once
}

func holdHost(n *brokerNode) *heldHost {
	h := &heldHost{ClusterHost: n.b, entered: make(chan struct{}), open: make(chan struct{})}
	n.Attach(h)
	return h
}

func (h *heldHost) BeginForwarded() *broker.Inbound {
	h.once.Do(func() {
		close(h.entered)
		<-h.open
	})
	return h.ClusterHost.BeginForwarded()
}

// TestPubackWaitsForPeers: the publisher's PUBACK (QoS 1) and PUBREC (QoS 2) go out only
// once the node that got the message acknowledged it.
func TestPubackWaitsForPeers(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("QoS=%d", qos), func(t *testing.T) {
			ns := startBrokers(t, 2)
			sub := mqtttest.Dial(t, ns[0].addr, "sub")
			sub.Sub(t, 2, "h/t")
			h := holdHost(ns[0])
			pub := mqtttest.Dial(t, ns[1].addr, "pub")
			acked := make(chan struct{})
			go func() {
				defer close(acked)
				ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
				defer cancel()
				_, _ = pub.Paho.Publish(ctx, &paho.Publish{Topic: "h/t", QoS: qos, Payload: []byte("x")})
			}()
			<-h.entered
			select {
			case <-acked:
				t.Fatal("acknowledged while the receiving node had not delivered the message")
			case <-time.After(300 * time.Millisecond): // a window: proving something does not happen
			}
			close(h.open)
			<-acked
			if g := sub.Next(t); g.Payload != "x" {
				t.Fatalf("got %+v", g)
			}
		})
	}
}

// TestExactlyOnceAcrossReconnect: a forward stream that breaks with a QoS 2 message
// unacknowledged resends it on the next stream; the receiving node delivers it once.
func TestExactlyOnceAcrossReconnect(t *testing.T) {
	ns := startBrokers(t, 2)
	sub := mqtttest.Dial(t, ns[0].addr, "sub")
	sub.Sub(t, 2, "e/#", "end")
	h := holdHost(ns[0])
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
			_, _ = pub.Paho.Publish(ctx, &paho.Publish{Topic: "e/t", QoS: 2, Payload: fmt.Appendf(nil, "%d", i)})
			cancel()
		}
	}()
	<-h.entered
	ns[1].peers.drop("n1") // the stream breaks with message 0 in flight
	close(h.open)
	<-done
	pub.Pub(t, &paho.Publish{Topic: "end", QoS: 2})
	msgs := sub.Until(t, "end")
	var payloads []string
	for _, g := range msgs {
		payloads = append(payloads, g.Payload)
	}
	if fmt.Sprint(payloads) != "[0 1 2 3 4]" {
		t.Fatalf("received %v, want each of 0 to 4 once, in order", payloads)
	}
	if ns[0].fwd.resent.Load() == 0 {
		t.Fatal("nothing was resent: the stream did not break with the message in flight")
	}
}

// TestSharedRedeliveredAcrossNodes: the messages a group member left unacknowledged when
// it disconnected go to a member on another node when none is left on its own.
func TestSharedRedeliveredAcrossNodes(t *testing.T) {
	ns := startBrokers(t, 3)
	nc, err := net.Dial("tcp", ns[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	got1 := make(chan struct{}, 16)
	lazy := paho.NewClient(paho.ClientConfig{ClientID: "lazy", Conn: packets.NewThreadSafeConn(nc),
		EnableManualAcknowledgment: true, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) {
			got1 <- struct{}{} // never acknowledged
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	if _, err := lazy.Connect(ctx, &paho.Connect{ClientID: "lazy", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := lazy.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/g/s/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := mqtttest.Dial(t, ns[1].addr, "pub")
	const n = 5
	for i := range n {
		pub.Pub(t, &paho.Publish{Topic: "s/t", QoS: 1, Payload: fmt.Appendf(nil, "%d", i)})
	}
	for range n {
		<-got1
	}
	m3 := mqtttest.Dial(t, ns[2].addr, "m3")
	m3.Sub(t, 1, "$share/g/s/#")
	_ = lazy.Disconnect(&paho.Disconnect{})
	seen := map[string]bool{}
	for range n {
		seen[m3.Next(t).Payload] = true
	}
	if len(seen) != n {
		t.Fatalf("the member on n3 got %v, want each of 0 to %d", seen, n-1)
	}
}
