package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// One client id, one live connection, cluster-wide, with separate processes: racing
// CONNECTs of one client id on every node, a persistent session resuming on another
// node, and a node paused (SIGSTOP) past failure detection and the lease whose client
// reconnects elsewhere.

// waitServing waits until nd accepts a CONNECT.
func waitServing(t testing.TB, nd *node) {
	t.Helper()
	testenv.WaitFor(t, nd.name+" accepting clients", func() bool { return mqtttest.Serving(nd.mqttAddr(), "probe-"+nd.name) })
}

// servingCluster starts a formed cluster of three processes (edit as for newCluster) that
// all accept clients, and returns it with its leader.
func servingCluster(t *testing.T, edit func(i int, k *nodeConfig)) (c *testCluster, leader string) {
	c = newCluster(t, 3, edit)
	c.start()
	_, leader = c.waitFormed()
	for _, nd := range c.nodes {
		waitServing(t, nd)
	}
	return c, leader
}

func persistent(id string) *packet.Connect {
	p := &packet.Connect{ClientID: []byte(id)}
	p.Props.SessionExpiry = packet.Some[uint32](600)
	return p
}

// TestOwnerRacingConnects: the same client id connects to every node at once, round
// after round: every CONNECT is accepted, then all connections but one are closed with
// DISCONNECT 0x8E, and the one left answers.
func TestOwnerRacingConnects(t *testing.T) {
	c, _ := servingCluster(t, nil)
	const rounds = 20
	for r := range rounds {
		addrs := make([]string, len(c.nodes))
		for i, nd := range c.nodes {
			addrs[i] = nd.mqttAddr()
		}
		winner := mqtttest.RaceConnects(t, fmt.Sprintf("racer-%d", r), addrs)
		_ = winner.Send(&packet.Disconnect{})
	}
	// Every session was clean and has ended: the ownership table is empty again on
	// every node (the releases are batched, and applied a moment later).
	for _, nd := range c.nodes {
		testenv.WaitFor(t, nd.name+"'s ownership table empty", func() bool {
			v, ok := nd.metric("bifrost_cluster_owned_client_ids")
			return ok && v == 0
		})
	}
}

// TestOwnerSessionResumes: a persistent session with QoS 1 messages queued while its
// client was offline resumes on another node with session present 1 and every message.
func TestOwnerSessionResumes(t *testing.T) {
	c, _ := servingCluster(t, nil)
	home, away := c.nodes[0], c.nodes[2]
	x := mqtttest.DialRaw(t, home.mqttAddr())
	if ack, err := x.Connect(persistent("keeper")); err != nil || ack.Code != packet.Success || ack.SessionPresent {
		t.Fatalf("first CONNACK %+v %v", ack, err)
	}
	x.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}}, packet.SUBACK)
	_ = x.Send(&packet.Disconnect{})

	// Published on the node that holds the offline session: forwarding between nodes
	// is the routes' part of the cluster.
	pub := mqtttest.DialRaw(t, home.mqttAddr())
	if ack, err := pub.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("pub")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("publisher CONNACK %+v %v", ack, err)
	}
	const n = 5
	for i := 1; i <= n; i++ {
		pub.Expect(t, &packet.Publish{Topic: []byte(fmt.Sprintf("q/%d", i)), Payload: []byte(fmt.Sprint("m", i)), QoS: 1, PacketID: uint16(i)}, packet.PUBACK)
	}

	y := mqtttest.DialRaw(t, away.mqttAddr())
	if ack, err := y.Connect(persistent("keeper")); err != nil || ack.Code != packet.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on %s: %+v %v; want session present", away.name, ack, err)
	}
	for i := 1; i <= n; i++ {
		p, err := y.Read(5 * time.Second)
		pp, ok := p.(*packet.Publish)
		if err != nil || !ok || string(pp.Payload) != fmt.Sprint("m", i) || pp.QoS != 1 {
			t.Fatalf("message %d on %s: %v %v", i, away.name, p, err)
		}
		_ = y.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: pp.PacketID})
	}
}

// TestOwnerPausedNode: a node holding a client, a follower or the leader, is paused
// (SIGSTOP) past failure detection and the lease; the client connects to another node,
// which takes the client id (the session that lived on the paused node is lost: session
// present 0). Resumed (SIGCONT), the paused node serves the old connection nothing (it
// is closed), and rejoins: it accepts clients again.
func TestOwnerPausedNode(t *testing.T) {
	for _, which := range []string{"follower", "leader"} {
		t.Run(which, func(t *testing.T) { testPausedNode(t, which == "leader") })
	}
}

func testPausedNode(t *testing.T, pauseLeader bool) {
	// A lease shorter than the default: the take-over waits it out, twice per test.
	c, leader := servingCluster(t, func(_ int, k *nodeConfig) { k.ClusterYAML = "    lease: 3s\n" })
	paused, others := c.split(leader, pauseLeader)
	old := mqtttest.DialRaw(t, paused.mqttAddr())
	if ack, err := old.Connect(persistent("sleeper")); err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNACK on %s: %+v %v", paused.name, ack, err)
	}
	paused.stop()
	testenv.WaitFor(t, paused.name+" declared dead", func() bool {
		s, err := others[0].status()
		if err != nil {
			return false
		}
		m, ok := s.member(paused.name)
		return ok && m.State == "dead"
	})
	moved := mqtttest.DialRaw(t, others[0].mqttAddr())
	ack, err := moved.Connect(persistent("sleeper"))
	if err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNACK on %s: %+v %v", others[0].name, ack, err)
	}
	if ack.SessionPresent {
		t.Error("session present 1 from a node that could not be asked for it")
	}
	paused.cont()
	// The old connection is closed, not served: a PINGREQ gets a DISCONNECT (0x9C: the
	// node fenced itself; 0x8E: it applied the claim first) or the connection ends.
	_ = old.Send(packet.Pingreq{})
	for {
		p, err := old.Read(20 * time.Second)
		if err != nil {
			if mqtttest.IsTimeout(err) {
				t.Fatal("the woken node neither answered nor closed the old connection")
			}
			break // closed
		}
		if d, ok := p.(*packet.Disconnect); ok {
			if d.Code != packet.UseAnotherServer && d.Code != packet.SessionTakenOver {
				t.Fatalf("the old connection got DISCONNECT %#x", byte(d.Code))
			}
			continue // then the close
		}
		t.Fatalf("the woken node served the old connection: %v", p.Type())
	}
	// The connection on the other node is still the live one.
	if err := moved.Send(packet.Pingreq{}); err != nil {
		t.Fatal(err)
	}
	if p, err := moved.Read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
		t.Fatalf("the moved connection: %v %v", p, err)
	}
	c.waitFormed()
	waitServing(t, paused)
}

// TestOwnerKilledNodeStorm: a node holding 30 clients is killed (SIGKILL); every one of
// them reconnects to the other two nodes at once. Each is accepted once its claim has
// waited out the lease (session present 0: its session died with the node), and each is
// live exactly once: a second CONNECT of the same id on the other node takes it over.
func TestOwnerKilledNodeStorm(t *testing.T) {
	c, leader := servingCluster(t, nil)
	victim, others := c.split(leader, false)
	const clients = 30
	for i := range clients {
		cl := mqtttest.DialRaw(t, victim.mqttAddr())
		if ack, err := cl.Connect(persistent(fmt.Sprint("storm-", i))); err != nil || ack.Code != packet.Success {
			t.Fatalf("client %d on %s: %+v %v", i, victim.name, ack, err)
		}
	}
	victim.kill()
	moved := make([]*mqtttest.Raw, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		moved[i] = mqtttest.DialRaw(t, others[i%2].mqttAddr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			ack, err := moved[i].Connect(persistent(fmt.Sprint("storm-", i)))
			switch {
			case err != nil:
				errs[i] = err
			case ack.Code != packet.Success || ack.SessionPresent:
				errs[i] = fmt.Errorf("CONNACK %#x, session present %v", byte(ack.Code), ack.SessionPresent)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("client %d reconnecting to %s: %v", i, others[i%2].name, err)
		}
	}
	if n := handovers(t, others, "lost"); n != clients {
		t.Errorf("hand-overs counted lost: %v; want %d", n, clients)
	}
	// One live connection per id: connecting each on the other survivor closes the first.
	for i := range clients {
		again := mqtttest.DialRaw(t, others[(i+1)%2].mqttAddr())
		if ack, err := again.Connect(persistent(fmt.Sprint("storm-", i))); err != nil || !ack.SessionPresent {
			t.Fatalf("client %d again on %s: %+v %v; want session present", i, others[(i+1)%2].name, ack, err)
		}
		if p, err := moved[i].Read(10 * time.Second); !mqtttest.TakenOver(p, err) {
			t.Fatalf("client %d on %s: %v %v; want DISCONNECT 0x8e", i, others[i%2].name, p, err)
		}
	}
	if n := handovers(t, others, "session"); n != clients {
		t.Errorf("hand-overs that brought a session: %v; want %d", n, clients)
	}
}

// handovers sums bifrost_cluster_handovers_total{outcome} over nodes.
func handovers(t *testing.T, nodes []*node, outcome string) float64 {
	t.Helper()
	sum := 0.0
	for _, nd := range nodes {
		v, ok := nd.metric(`bifrost_cluster_handovers_total{outcome="` + outcome + `"}`)
		if !ok {
			t.Fatalf("%s has no bifrost_cluster_handovers_total{outcome=%q}", nd.name, outcome)
		}
		sum += v
	}
	return sum
}

// TestOwnerElectionKeepsLease: the leader is killed and the others elect a new one well
// within the lease (6s here): neither survivor fences itself, so their clients stay
// connected through the failover; only a node cut off for the lease stops serving.
func TestOwnerElectionKeepsLease(t *testing.T) {
	c := newCluster(t, 3, func(_ int, k *nodeConfig) { k.ClusterYAML = "    lease: 6s\n" })
	c.start()
	_, leader := c.waitFormed()
	_, others := c.split(leader, true)
	held := mqtttest.DialRaw(t, others[0].mqttAddr())
	if ack, err := held.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("through")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNACK %+v %v", ack, err)
	}
	c.node(leader).kill()
	testenv.WaitFor(t, "a new leader", func() bool {
		s, err := others[0].status()
		return err == nil && s.Leader != "" && s.Leader != leader
	})
	for _, nd := range others {
		testenv.WaitFor(t, nd.name+" serving", func() bool {
			v, ok := nd.metric("bifrost_cluster_serving")
			return ok && v == 1
		})
		if v, ok := nd.metric("bifrost_cluster_self_fenced_total"); !ok || v != 0 {
			t.Errorf("%s fenced itself %v times during an election shorter than the lease", nd.name, v)
		}
	}
	if err := held.Send(packet.Pingreq{}); err != nil {
		t.Fatal(err)
	}
	if p, err := held.Read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
		t.Fatalf("the client on %s after the failover: %v %v", others[0].name, p, err)
	}
}
