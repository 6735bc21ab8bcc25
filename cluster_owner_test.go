package bifrost_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
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
		testenv.WaitFor(t, n.name+" serving clients", func() bool { return mqtttest.Serving(n.Addrs()[0].String(), "probe-"+n.name) })
	}
	return nodes
}

// TestClusterRacingConnects: the same client id connects to every node at once, round
// after round: each round exactly one connection stays, and every other gets a CONNACK
// and then DISCONNECT 0x8E (session taken over).
func TestClusterRacingConnects(t *testing.T) {
	nodes := threeNodes(t)
	const rounds = 15
	for r := range rounds {
		addrs := make([]string, len(nodes))
		for i, n := range nodes {
			addrs[i] = n.Addrs()[0].String()
		}
		mqtttest.RaceConnects(t, fmt.Sprintf("racer-%d", r), addrs)
	}
}

// TestClusterSessionResumesElsewhere: a persistent session with QoS 1 messages queued
// while it was offline resumes on another node: session present 1 and every message
// delivered; then a third node takes it from a live connection (0x8E) with what was left
// unacknowledged.
func TestClusterSessionResumesElsewhere(t *testing.T) {
	nodes := threeNodes(t)
	addr := func(i int) string { return nodes[i].Addrs()[0].String() }
	persistent := func() *packet.Connect {
		p := &packet.Connect{ClientID: []byte("keeper")}
		p.Props.SessionExpiry = packet.Some[uint32](600)
		return p
	}
	x := mqtttest.DialRaw(t, addr(0))
	if ack, err := x.Connect(persistent()); err != nil || ack.Code != packet.Success || ack.SessionPresent {
		t.Fatalf("first CONNACK %+v %v", ack, err)
	}
	x.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}}, packet.SUBACK)
	_ = x.Send(&packet.Disconnect{})
	_ = x.Conn.Close()

	// Published on the node that holds the offline session (routes between nodes are
	// another part of the cluster).
	pub := mqtttest.DialRaw(t, addr(0))
	if ack, err := pub.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("pub")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("publisher CONNACK %+v %v", ack, err)
	}
	for i := 1; i <= 3; i++ {
		pub.Expect(t, &packet.Publish{Topic: []byte(fmt.Sprintf("q/%d", i)), Payload: []byte(fmt.Sprint("m", i)), QoS: 1, PacketID: uint16(i)}, packet.PUBACK)
	}

	y := mqtttest.DialRaw(t, addr(1))
	if ack, err := y.Connect(persistent()); err != nil || ack.Code != packet.Success || !ack.SessionPresent {
		t.Fatalf("CONNACK on n2 %+v %v; want session present", ack, err)
	}
	for i := 1; i <= 3; i++ {
		p, err := y.Read(5 * time.Second)
		pp, ok := p.(*packet.Publish)
		if err != nil || !ok || string(pp.Payload) != fmt.Sprint("m", i) {
			t.Fatalf("message %d on n2: %v %v", i, p, err)
		}
		if i < 3 { // the last stays unacknowledged
			_ = y.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: pp.PacketID})
		}
	}

	z := mqtttest.DialRaw(t, addr(2))
	if ack, err := z.Connect(persistent()); err != nil || !ack.SessionPresent {
		t.Fatalf("CONNACK on n3 %+v %v; want session present", ack, err)
	}
	if p, err := y.Read(5 * time.Second); !mqtttest.TakenOver(p, err) {
		t.Fatalf("n2's connection: %v %v; want DISCONNECT 0x8e", p, err)
	}
	p, err := z.Read(5 * time.Second)
	if pp, ok := p.(*packet.Publish); err != nil || !ok || string(pp.Payload) != "m3" || !pp.Dup {
		t.Fatalf("on n3: %v %v; want m3 again, DUP", p, err)
	}
}

// TestClusterAdminAPI: on a cluster the admin API lists the nodes, says which node a
// client id is on and lists the clients of every node, from any node.
func TestClusterAdminAPI(t *testing.T) {
	nodes := threeNodes(t)
	mqtttest.Dial(t, nodes[1].Addrs()[0].String(), "located")
	code, body, err := get(t, nodes[0].HTTPAddr(), "/api/v1/nodes")
	if err != nil || code != 200 || !strings.Contains(body, `"clustered": true`) ||
		!strings.Contains(body, `"name": "n2"`) || !strings.Contains(body, `"name": "n3"`) {
		t.Fatalf("/api/v1/nodes on n1: %d %v %s", code, err, body)
	}
	for _, n := range nodes {
		testenv.WaitFor(t, n.name+" knowing where located is", func() bool {
			code, body, err := get(t, n.HTTPAddr(), "/api/v1/clients/located/node")
			return err == nil && code == 200 && strings.Contains(body, `"node": "n2"`) &&
				strings.Contains(body, fmt.Sprintf(`"this_node": %v`, n.name == "n2"))
		})
	}
	// The listing of every node, asked of n1 and n3, finds it on n2 (test/cluster pages
	// through three processes).
	for _, n := range []*clusterNode{nodes[0], nodes[2]} {
		code, body, err := get(t, n.HTTPAddr(), "/api/v1/clients?client_id_prefix=loc")
		var page struct {
			Data []struct {
				Node     string `json:"node"`
				ClientID string `json:"client_id"`
			} `json:"data"`
			Unavailable []any `json:"unavailable"`
		}
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Unavailable) != 0 ||
			len(page.Data) != 1 || page.Data[0].Node != "n2" || page.Data[0].ClientID != "located" {
			t.Errorf("the clients of every node on %s: %d %v %s", n.name, code, err, body)
		}
	}
	if code, _, _ := get(t, nodes[2].HTTPAddr(), "/api/v1/clients/nobody/node"); code != 404 {
		t.Errorf("a client id nobody has: %d; want 404", code)
	}
}
