package cluster

import (
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// secret is the test clusters' cluster.secret.
const secret = "test-cluster-secret-0123456789"

// TestRefuseStrangers: a cluster with a secret refuses a node of another cluster (it
// holds the secret, but a different cluster id: refused at gossip on both sides, and the
// two never merge), a node with another secret and a node without one (their gossip
// cannot be read: counted and logged with their address at gossip; and a connection to
// the rpc port that does not hold the secret is closed at the handshake).
func TestRefuseStrangers(t *testing.T) {
	a := newCluster(t, 3, func(_ int, c *nodeConfig) { c.Secret = secret })
	a.start()
	idA, _ := a.waitFormed()

	t.Run("another cluster", func(t *testing.T) {
		b1 := newNode(t, "b1", nodeConfig{BootstrapExpect: 1, Secret: secret})
		b1.start()
		idB, _ := (&testCluster{t: t, nodes: []*node{b1}}).waitFormed()
		if idB == idA {
			t.Fatalf("two clusters with one id %s", idA)
		}
		// b1 now knows its cluster; started again with a's node as its seed, it tries
		// to join a.
		b1.term()
		b1.cfg.Seeds = []string{a.nodes[0].gossip}
		b1.start()
		testenv.WaitFor(t, "the nodes of both clusters refusing each other", func() bool {
			return refused(b1, "gossip") > 0 && refused(a.nodes[0], "gossip") > 0
		})
		for _, nd := range a.nodes {
			s := nd.mustStatus()
			if _, ok := s.member("b1"); ok || s.ClusterID != idA {
				t.Errorf("%s (cluster %s) lists b1: %+v", nd.name, s.ClusterID, s.Members)
			}
		}
		s := b1.mustStatus()
		if len(s.Members) != 1 || s.ClusterID != idB {
			t.Errorf("b1 (cluster %s, want %s) lists %+v", s.ClusterID, idB, s.Members)
		}
	})

	t.Run("another secret", func(t *testing.T) {
		w := newNode(t, "w1", nodeConfig{BootstrapExpect: 3, Seeds: []string{a.nodes[0].gossip}, Secret: "not the " + secret})
		before := refused(a.nodes[0], "gossip")
		w.start()
		testenv.WaitFor(t, "w1's gossip refused, counted and logged at "+a.nodes[0].name, func() bool {
			return refused(a.nodes[0], "gossip") > before && gossipRefusalLogged(a.nodes[0])
		})
		for _, nd := range a.nodes {
			if _, ok := nd.mustStatus().member("w1"); ok {
				t.Errorf("%s lists w1, which has another secret", nd.name)
			}
		}
		w.kill()
	})

	t.Run("no secret", func(t *testing.T) {
		c := newNode(t, "c1", nodeConfig{BootstrapExpect: 3, Seeds: []string{a.nodes[1].gossip}})
		before := refused(a.nodes[1], "gossip")
		c.start()
		testenv.WaitFor(t, "c1's join refused", func() bool {
			return strings.Contains(c.logs(), "no seed answered yet")
		})
		testenv.WaitFor(t, "c1's gossip refused, counted and logged at "+a.nodes[1].name, func() bool {
			return refused(a.nodes[1], "gossip") > before && gossipRefusalLogged(a.nodes[1])
		})
		// The rpc port: a gRPC client without the secret opens with the HTTP/2
		// preface, which is not the TLS handshake the port wants.
		conn, err := net.Dial("tcp", a.nodes[0].rpc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		_ = conn.SetReadDeadline(time.Now().Add(testenv.Timeout))
		if n, err := io.Copy(io.Discard, conn); err != nil || n > 0 {
			t.Errorf("the rpc port answered a peer without the secret: %d bytes, %v", n, err)
		}
		testenv.WaitFor(t, "the rpc refusal counted", func() bool { return refused(a.nodes[0], "rpc") > 0 })
		for _, nd := range a.nodes {
			if _, ok := nd.mustStatus().member("c1"); ok {
				t.Errorf("%s lists c1, which has no secret", nd.name)
			}
		}
		if s := c.mustStatus(); !slices.Equal(s.alive(), []string{"c1"}) || s.ClusterID != "" {
			t.Errorf("c1 sees %v of cluster %q", s.alive(), s.ClusterID)
		}
	})
}

// gossipRefusalLogged reports whether nd logged the refusal of gossip it could not
// decrypt, from an address on loopback.
func gossipRefusalLogged(nd *node) bool {
	for _, line := range strings.Split(nd.logs(), "\n") {
		if strings.Contains(line, `msg="cluster: refused a node" addr=127.0.0.1:`) && strings.Contains(line, "cluster.secret") {
			return true
		}
	}
	return false
}

// refused returns a node's count of refused peers at "gossip" or "rpc".
func refused(nd *node, at string) float64 {
	v, _ := nd.metric(`bifrost_cluster_refused_total{at="` + at + `"}`)
	return v
}
