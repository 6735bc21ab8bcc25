package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// One client id, one live connection, cluster-wide, with separate processes: racing
// CONNECTs of one client id on every node, a persistent session resuming on another
// node, and a node paused (SIGSTOP) past failure detection and the lease whose client
// reconnects elsewhere.

// rawClient is a raw MQTT 5 client reading one packet at a time.
type rawClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawClient{conn: c, r: bufio.NewReader(c)}
}

func (c *rawClient) send(p packet.Packet) error {
	_, err := c.conn.Write(p.AppendTo(nil, packet.V5))
	return err
}

// read returns the next packet, waiting up to d.
func (c *rawClient) read(d time.Duration) (packet.Packet, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	var hdr []byte
	for len(hdr) < 5 {
		b, err := c.r.ReadByte()
		if err != nil {
			return nil, err
		}
		hdr = append(hdr, b)
		if len(hdr) > 1 && b&0x80 == 0 {
			break
		}
	}
	h, n, err := packet.ParseHeader(hdr, packet.V5)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("bad header % x: %v", hdr, err)
	}
	body := make([]byte, h.Remaining)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return nil, err
	}
	return packet.Decode(h, body, packet.V5)
}

// connect sends p and returns the CONNACK.
func (c *rawClient) connect(p *packet.Connect) (*packet.Connack, error) {
	p.Version = packet.V5
	if p.KeepAlive == 0 {
		p.KeepAlive = 60
	}
	if err := c.send(p); err != nil {
		return nil, err
	}
	pk, err := c.read(20 * time.Second)
	if err != nil {
		return nil, err
	}
	if ack, ok := pk.(*packet.Connack); ok {
		return ack, nil
	}
	return nil, fmt.Errorf("%v, not CONNACK", pk.Type())
}

// takenOver reports whether p, err is DISCONNECT 0x8E.
func takenOver(p packet.Packet, err error) bool {
	d, ok := p.(*packet.Disconnect)
	return err == nil && ok && d.Code == packet.SessionTakenOver
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitServing waits until nd accepts a CONNECT.
func waitServing(t testing.TB, nd *node) {
	t.Helper()
	testenv.WaitFor(t, nd.name+" accepting clients", func() bool {
		c, err := net.DialTimeout("tcp", nd.mqttAddr(), time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		mc := &rawClient{conn: c, r: bufio.NewReader(c)}
		ack, err := mc.connect(&packet.Connect{CleanStart: true, ClientID: []byte("probe-" + nd.name)})
		return err == nil && ack.Code == packet.Success
	})
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
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	for _, nd := range c.nodes {
		waitServing(t, nd)
	}
	const rounds = 20
	for r := range rounds {
		cid := fmt.Sprintf("racer-%d", r)
		clients := make([]*rawClient, len(c.nodes))
		errs := make([]error, len(c.nodes))
		var wg sync.WaitGroup
		for i, nd := range c.nodes {
			clients[i] = dialRaw(t, nd.mqttAddr())
			wg.Add(1)
			go func() {
				defer wg.Done()
				ack, err := clients[i].connect(&packet.Connect{CleanStart: true, ClientID: []byte(cid)})
				if err == nil && ack.Code != packet.Success {
					err = fmt.Errorf("CONNACK %#x", byte(ack.Code))
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: CONNECT on %s: %v", r, c.nodes[i].name, err)
			}
		}
		closed := make([]bool, len(clients))
		losers := 0
		deadline := time.Now().Add(15 * time.Second)
		for losers < len(clients)-1 && time.Now().Before(deadline) {
			for i, cl := range clients {
				if closed[i] {
					continue
				}
				p, err := cl.read(50 * time.Millisecond)
				switch d, ok := p.(*packet.Disconnect); {
				case ok && d.Code == packet.SessionTakenOver:
					closed[i] = true
					losers++
				case err != nil && isTimeout(err):
				default:
					t.Fatalf("round %d: the client on %s got %v, %v", r, c.nodes[i].name, p, err)
				}
			}
		}
		if losers != len(clients)-1 {
			t.Fatalf("round %d: %d of %d connections taken over; want all but one", r, losers, len(clients))
		}
		for i, cl := range clients {
			if closed[i] {
				continue
			}
			if err := cl.send(packet.Pingreq{}); err != nil {
				t.Fatalf("round %d: the winner on %s: %v", r, c.nodes[i].name, err)
			}
			if p, err := cl.read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
				t.Fatalf("round %d: the winner on %s does not answer: %v %v", r, c.nodes[i].name, p, err)
			}
			_ = cl.send(&packet.Disconnect{})
		}
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
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	for _, nd := range c.nodes {
		waitServing(t, nd)
	}
	home, away := c.nodes[0], c.nodes[2]
	x := dialRaw(t, home.mqttAddr())
	if ack, err := x.connect(persistent("keeper")); err != nil || ack.Code != packet.Success || ack.SessionPresent {
		t.Fatalf("first CONNACK %+v %v", ack, err)
	}
	if err := x.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	if p, err := x.read(5 * time.Second); err != nil || p.Type() != packet.SUBACK {
		t.Fatalf("SUBACK: %v %v", p, err)
	}
	_ = x.send(&packet.Disconnect{})

	// Published on the node that holds the offline session: forwarding between nodes
	// is the routes' part of the cluster.
	pub := dialRaw(t, home.mqttAddr())
	if ack, err := pub.connect(&packet.Connect{CleanStart: true, ClientID: []byte("pub")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("publisher CONNACK %+v %v", ack, err)
	}
	const n = 5
	for i := 1; i <= n; i++ {
		if err := pub.send(&packet.Publish{Topic: []byte(fmt.Sprintf("q/%d", i)), Payload: []byte(fmt.Sprint("m", i)), QoS: 1, PacketID: uint16(i)}); err != nil {
			t.Fatal(err)
		}
		if p, err := pub.read(5 * time.Second); err != nil || p.Type() != packet.PUBACK {
			t.Fatalf("PUBACK %d: %v %v", i, p, err)
		}
	}

	y := dialRaw(t, away.mqttAddr())
	if ack, err := y.connect(persistent("keeper")); err != nil || ack.Code != packet.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on %s: %+v %v; want session present", away.name, ack, err)
	}
	for i := 1; i <= n; i++ {
		p, err := y.read(5 * time.Second)
		pp, ok := p.(*packet.Publish)
		if err != nil || !ok || string(pp.Payload) != fmt.Sprint("m", i) || pp.QoS != 1 {
			t.Fatalf("message %d on %s: %v %v", i, away.name, p, err)
		}
		_ = y.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: pp.PacketID})
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
	c := newCluster(t, 3, func(_ int, k *nodeConfig) { k.ClusterYAML = "    lease: 3s\n" })
	c.start()
	_, leader := c.waitFormed()
	var paused *node
	var others []*node
	for _, nd := range c.nodes {
		waitServing(t, nd)
		if (nd.name == leader) == pauseLeader && paused == nil {
			paused = nd
		} else {
			others = append(others, nd)
		}
	}
	old := dialRaw(t, paused.mqttAddr())
	if ack, err := old.connect(persistent("sleeper")); err != nil || ack.Code != packet.Success {
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
	moved := dialRaw(t, others[0].mqttAddr())
	ack, err := moved.connect(persistent("sleeper"))
	if err != nil || ack.Code != packet.Success {
		t.Fatalf("CONNACK on %s: %+v %v", others[0].name, ack, err)
	}
	if ack.SessionPresent {
		t.Error("session present 1 from a node that could not be asked for it")
	}
	paused.cont()
	// The old connection is closed, not served: a PINGREQ gets a DISCONNECT (0x9C: the
	// node fenced itself; 0x8E: it applied the claim first) or the connection ends.
	_ = old.send(packet.Pingreq{})
	for {
		p, err := old.read(20 * time.Second)
		if err != nil {
			if isTimeout(err) {
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
	if err := moved.send(packet.Pingreq{}); err != nil {
		t.Fatal(err)
	}
	if p, err := moved.read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
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
	c := newCluster(t, 3, nil)
	c.start()
	_, leader := c.waitFormed()
	var victim *node
	var others []*node
	for _, nd := range c.nodes {
		waitServing(t, nd)
		if nd.name != leader && victim == nil {
			victim = nd
		} else {
			others = append(others, nd)
		}
	}
	const clients = 30
	for i := range clients {
		cl := dialRaw(t, victim.mqttAddr())
		if ack, err := cl.connect(persistent(fmt.Sprint("storm-", i))); err != nil || ack.Code != packet.Success {
			t.Fatalf("client %d on %s: %+v %v", i, victim.name, ack, err)
		}
	}
	victim.kill()
	moved := make([]*rawClient, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		moved[i] = dialRaw(t, others[i%2].mqttAddr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			ack, err := moved[i].connect(persistent(fmt.Sprint("storm-", i)))
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
		again := dialRaw(t, others[(i+1)%2].mqttAddr())
		if ack, err := again.connect(persistent(fmt.Sprint("storm-", i))); err != nil || !ack.SessionPresent {
			t.Fatalf("client %d again on %s: %+v %v; want session present", i, others[(i+1)%2].name, ack, err)
		}
		if p, err := moved[i].read(10 * time.Second); !takenOver(p, err) {
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
	var others []*node
	for _, nd := range c.nodes {
		if nd.name != leader {
			others = append(others, nd)
		}
	}
	held := dialRaw(t, others[0].mqttAddr())
	if ack, err := held.connect(&packet.Connect{CleanStart: true, ClientID: []byte("through")}); err != nil || ack.Code != packet.Success {
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
	if err := held.send(packet.Pingreq{}); err != nil {
		t.Fatal(err)
	}
	if p, err := held.read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
		t.Fatalf("the client on %s after the failover: %v %v", others[0].name, p, err)
	}
}
