package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// loadReport is GET /load as internal/metrics writes it.
type loadReport struct {
	Load  float64 `json:"load"`
	Nodes []struct {
		Name   string  `json:"name"`
		State  string  `json:"state"`
		Leader bool    `json:"leader"`
		Self   bool    `json:"self"`
		RPC    string  `json:"rpc"`
		MQTT   string  `json:"mqtt"`
		Load   float64 `json:"load"`
	} `json:"nodes"`
}

func (nd *node) load() (loadReport, error) {
	var r loadReport
	body, err := nd.get("/load")
	if err == nil {
		err = json.Unmarshal(body, &r)
	}
	return r, err
}

// TestLoadRedirect: /load on any node shows every node (name, rpc and MQTT addresses,
// load figure, state, the leader); the cluster's Raft and membership series are on
// /metrics; a node whose load is above cluster.redirect_load (here: 3 of its 4
// connections in use, against 0.5) answers an MQTT 5 CONNECT with 0x9C and a Server
// Reference to a less loaded node, still serves a 3.1.1 client (which cannot be
// redirected), and serves MQTT 5 clients again once its load is down.
func TestLoadRedirect(t *testing.T) {
	c := newCluster(t, 3, func(i int, k *nodeConfig) {
		if i == 0 {
			k.ClusterYAML = "    redirect_load: 0.5\n"
			k.YAML = "limits:\n  max_connections: 4\n"
		}
	})
	c.start()
	_, leader := c.waitFormed()
	busy, others := c.nodes[0], c.nodes[1:]

	r, err := others[0].load()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Nodes) != 3 {
		t.Fatalf("/load of %s lists %d nodes: %+v", others[0].name, len(r.Nodes), r.Nodes)
	}
	for _, n := range r.Nodes {
		nd := c.node(n.Name)
		if n.State != "alive" || n.RPC != nd.rpc || n.MQTT != nd.mqttAddr() || n.Leader != (n.Name == leader) ||
			n.Self != (nd == others[0]) || n.Load <= 0 || n.Load >= 0.5 {
			t.Errorf("/load of %s: %+v; want alive, rpc %s, mqtt %s, leader %v", others[0].name, n, nd.rpc, nd.mqttAddr(), n.Name == leader)
		}
	}
	lead := c.node(leader)
	for series, want := range map[string]float64{
		`bifrost_cluster_raft_state{state="leader"}`: 1,
		`bifrost_cluster_members{state="alive"}`:     3,
		`bifrost_cluster_members{state="dead"}`:      0,
	} {
		if v, ok := lead.metric(series); !ok || v != want {
			t.Errorf("%s on the leader: %v (found %v); want %v", series, v, ok, want)
		}
	}
	for _, series := range []string{"bifrost_cluster_raft_term", "bifrost_cluster_raft_commit_index",
		`bifrost_cluster_apply_seconds_count{via="leader"}`} {
		if v, ok := lead.metric(series); !ok || v < 1 {
			t.Errorf("%s on the leader: %v (found %v); want at least 1", series, v, ok)
		}
	}

	var held []net.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	for i := range 3 {
		ack, conn, err := mqttConnect(busy.mqttAddr(), fmt.Sprintf("held-%d", i), packet.V311)
		if err != nil || ack.Code != packet.Success {
			t.Fatalf("client %d on %s: %v %v", i, busy.name, ack.Code, err)
		}
		held = append(held, conn)
	}
	want := map[string]bool{others[0].mqttAddr(): true, others[1].mqttAddr(): true}
	var ack packet.Connack
	testenv.WaitFor(t, busy.name+" redirecting MQTT 5 clients", func() bool {
		a, conn, err := mqttConnect(busy.mqttAddr(), "v5", packet.V5)
		if err != nil {
			return false
		}
		conn.Close()
		ack = a
		return a.Code == packet.UseAnotherServer
	})
	if ref := string(ack.Props.ServerReference); !want[ref] {
		t.Errorf("Server Reference %q; want one of %v", ref, want)
	}
	testenv.WaitFor(t, "the others told of "+busy.name+"'s load", func() bool {
		r, err := others[1].load()
		if err != nil {
			return false
		}
		for _, n := range r.Nodes {
			if n.Name == busy.name {
				return n.Load >= 0.5
			}
		}
		return false
	})
	// The fourth and last connection (once the redirected ones are closed): a 3.1.1
	// client is served.
	testenv.WaitFor(t, "a 3.1.1 client served by "+busy.name, func() bool {
		a, conn, err := mqttConnect(busy.mqttAddr(), "v311", packet.V311)
		if err != nil {
			return false
		}
		conn.Close()
		return a.Code == packet.Success
	})

	for _, conn := range held {
		conn.Close()
	}
	held = nil
	testenv.WaitFor(t, busy.name+" serving MQTT 5 clients again", func() bool {
		a, conn, err := mqttConnect(busy.mqttAddr(), "v5", packet.V5)
		if err != nil {
			return false
		}
		conn.Close()
		return a.Code == packet.Success
	})
}
