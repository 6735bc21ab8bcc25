package bifrost_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// One client id, one live connection, cluster-wide, on three in-process nodes with real
// sockets: Raft, gossip and gRPC between them, MQTT clients over TCP. test/cluster runs
// the faults that need a process to stop.

type clusterNode struct {
	*bifrost.Broker
	name string
	logs *syncBuffer
}

// startClusterNode starts a node of a cluster of expect nodes; seed is a gossip address
// to join ("" for the first node).
func startClusterNode(t *testing.T, name string, expect int, seed string) *clusterNode {
	t.Helper()
	cfg := testConfig(t)
	cfg.Cluster = &bifrost.Cluster{NodeName: name, Bind: "127.0.0.1:0", RPC: "127.0.0.1:0", BootstrapExpect: expect}
	if seed != "" {
		cfg.Cluster.Seeds = []string{seed}
	}
	logs := &syncBuffer{}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	n := &clusterNode{Broker: b, name: name, logs: logs}
	t.Cleanup(func() {
		_ = b.Close()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, logs)
		}
	})
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return n
}

// gossip is the node's gossip address, from /cluster.
func (n *clusterNode) gossip(t *testing.T) string {
	t.Helper()
	var st struct {
		Members []struct{ Name, Gossip string } `json:"members"`
	}
	code, body, err := get(t, n.HTTPAddr(), "/cluster")
	if err != nil || code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/cluster of %s: %d %v %s", n.name, code, err, body)
	}
	for _, m := range st.Members {
		if m.Name == n.name {
			return m.Gossip
		}
	}
	t.Fatalf("%s is not in its own /cluster: %s", n.name, body)
	return ""
}

// threeNodes starts a cluster of three and waits until every node accepts a CONNECT.
func threeNodes(t *testing.T) []*clusterNode {
	t.Helper()
	n1 := startClusterNode(t, "n1", 3, "")
	seed := n1.gossip(t)
	nodes := []*clusterNode{n1, startClusterNode(t, "n2", 3, seed), startClusterNode(t, "n3", 3, seed)}
	for _, n := range nodes {
		testenv.WaitFor(t, n.name+" serving clients", func() bool {
			c, err := dialMQTT(n.Addrs()[0].String())
			if err != nil {
				return false
			}
			defer c.close()
			ack, err := c.connect(&packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("probe-" + n.name)})
			return err == nil && ack.Code == packet.Success
		})
	}
	return nodes
}

// mqttClient is a raw MQTT 5 client: it writes packets and reads them one at a time.
type mqttClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialMQTT(addr string) (*mqttClient, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &mqttClient{conn: c, r: bufio.NewReader(c)}, nil
}

func (c *mqttClient) close() { _ = c.conn.Close() }

func (c *mqttClient) send(p packet.Packet) error {
	_, err := c.conn.Write(p.AppendTo(nil, packet.V5))
	return err
}

// read returns the next packet, waiting up to d; io.EOF once the broker closed.
func (c *mqttClient) read(d time.Duration) (packet.Packet, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	first, err := c.r.ReadByte()
	if err != nil {
		return nil, err
	}
	hdr := []byte{first}
	for i := 0; i < 4; i++ {
		b, err := c.r.ReadByte()
		if err != nil {
			return nil, err
		}
		hdr = append(hdr, b)
		if b&0x80 == 0 {
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

func (c *mqttClient) connect(p *packet.Connect) (*packet.Connack, error) {
	if p.KeepAlive == 0 {
		p.KeepAlive = 60
	}
	if err := c.send(p); err != nil {
		return nil, err
	}
	pk, err := c.read(15 * time.Second)
	if err != nil {
		return nil, err
	}
	ack, ok := pk.(*packet.Connack)
	if !ok {
		return nil, fmt.Errorf("got %v, not CONNACK", pk.Type())
	}
	return ack, nil
}

// TestClusterRacingConnects: the same client id connects to every node at once, round
// after round: each round exactly one connection stays, and every other gets a CONNACK
// and then DISCONNECT 0x8E (session taken over).
func TestClusterRacingConnects(t *testing.T) {
	nodes := threeNodes(t)
	const rounds = 15
	for r := range rounds {
		cid := fmt.Sprintf("racer-%d", r)
		clients := make([]*mqttClient, len(nodes))
		acks := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			c, err := dialMQTT(n.Addrs()[0].String())
			if err != nil {
				t.Fatal(err)
			}
			clients[i] = c
			defer c.close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				ack, err := c.connect(&packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte(cid)})
				if err == nil && ack.Code != packet.Success {
					err = fmt.Errorf("CONNACK %#x", byte(ack.Code))
				}
				acks[i] = err
			}()
		}
		wg.Wait()
		for i, err := range acks {
			if err != nil {
				t.Fatalf("round %d: CONNECT on %s: %v", r, nodes[i].name, err)
			}
		}
		// Every CONNECT was accepted; all but one are then taken over.
		closed := make([]bool, len(nodes))
		losers := 0
		deadline := time.Now().Add(10 * time.Second)
		for losers < len(nodes)-1 && time.Now().Before(deadline) {
			for i, c := range clients {
				if closed[i] {
					continue
				}
				p, err := c.read(50 * time.Millisecond)
				switch d, ok := p.(*packet.Disconnect); {
				case ok && d.Code == packet.SessionTakenOver:
					closed[i] = true
					losers++
				case err != nil && isTimeout(err):
				default:
					t.Fatalf("round %d: the client on %s got %v, %v", r, nodes[i].name, p, err)
				}
			}
		}
		if losers != len(nodes)-1 {
			t.Fatalf("round %d: %d of %d connections of %s taken over; want all but one", r, losers, len(nodes), cid)
		}
		for i, c := range clients {
			if closed[i] {
				continue
			}
			if err := c.send(packet.Pingreq{}); err != nil {
				t.Fatalf("round %d: the winner on %s: %v", r, nodes[i].name, err)
			}
			if p, err := c.read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
				t.Fatalf("round %d: the winner on %s does not answer: %v %v", r, nodes[i].name, p, err)
			}
		}
	}
}

func isTakenOver(p packet.Packet) bool {
	d, ok := p.(*packet.Disconnect)
	return ok && d.Code == packet.SessionTakenOver
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestClusterSessionResumesElsewhere: a persistent session with QoS 1 messages queued
// while it was offline resumes on another node: session present 1 and every message
// delivered; then a third node takes it from a live connection (0x8E) with what was left
// unacknowledged.
func TestClusterSessionResumesElsewhere(t *testing.T) {
	nodes := threeNodes(t)
	addr := func(i int) string { return nodes[i].Addrs()[0].String() }
	persistent := func() *packet.Connect {
		p := &packet.Connect{Version: packet.V5, ClientID: []byte("keeper")}
		p.Props.SessionExpiry = packet.Some[uint32](600)
		return p
	}
	x, err := dialMQTT(addr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	if ack, err := x.connect(persistent()); err != nil || ack.Code != packet.Success || ack.SessionPresent {
		t.Fatalf("first CONNACK %+v %v", ack, err)
	}
	if err := x.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	if p, err := x.read(5 * time.Second); err != nil || p.Type() != packet.SUBACK {
		t.Fatalf("SUBACK: %v %v", p, err)
	}
	_ = x.send(&packet.Disconnect{})
	x.close()

	// Published on the node that holds the offline session (routes between nodes are
	// another part of the cluster).
	pub, err := dialMQTT(addr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.close()
	if ack, err := pub.connect(&packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("pub")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("publisher CONNACK %+v %v", ack, err)
	}
	for i := 1; i <= 3; i++ {
		if err := pub.send(&packet.Publish{Topic: []byte(fmt.Sprintf("q/%d", i)), Payload: []byte(fmt.Sprint("m", i)), QoS: 1, PacketID: uint16(i)}); err != nil {
			t.Fatal(err)
		}
		if p, err := pub.read(5 * time.Second); err != nil || p.Type() != packet.PUBACK {
			t.Fatalf("PUBACK %d: %v %v", i, p, err)
		}
	}

	y, err := dialMQTT(addr(1))
	if err != nil {
		t.Fatal(err)
	}
	defer y.close()
	if ack, err := y.connect(persistent()); err != nil || ack.Code != packet.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on n2 %+v %v; want session present", ack, err)
	}
	for i := 1; i <= 3; i++ {
		p, err := y.read(5 * time.Second)
		pp, ok := p.(*packet.Publish)
		if err != nil || !ok || string(pp.Payload) != fmt.Sprint("m", i) {
			t.Fatalf("message %d on n2: %v %v", i, p, err)
		}
		if i < 3 { // the last stays unacknowledged
			_ = y.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: pp.PacketID})
		}
	}

	z, err := dialMQTT(addr(2))
	if err != nil {
		t.Fatal(err)
	}
	defer z.close()
	if ack, err := z.connect(persistent()); err != nil || !ack.SessionPresent {
		t.Fatalf("CONNACK on n3 %+v %v; want session present", ack, err)
	}
	if p, err := y.read(5 * time.Second); err != nil || !isTakenOver(p) {
		t.Fatalf("n2's connection: %v %v; want DISCONNECT 0x8e", p, err)
	}
	p, err := z.read(5 * time.Second)
	if pp, ok := p.(*packet.Publish); err != nil || !ok || string(pp.Payload) != "m3" || !pp.Dup {
		t.Fatalf("on n3: %v %v; want m3 again, DUP", p, err)
	}
}
