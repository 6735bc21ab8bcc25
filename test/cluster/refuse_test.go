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
// two never merge) and a node without the secret (its gossip cannot be read, and a
// connection to the rpc port that does not hold the secret is closed at the handshake).
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

	t.Run("no secret", func(t *testing.T) {
		c := newNode(t, "c1", nodeConfig{BootstrapExpect: 3, Seeds: []string{a.nodes[0].gossip}})
		c.start()
		testenv.WaitFor(t, "c1's join refused", func() bool {
			return strings.Contains(c.logs(), "no seed answered yet")
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

// refused returns a node's count of refused peers at "gossip" or "rpc".
func refused(nd *node, at string) float64 {
	v, _ := nd.metric(`bifrost_cluster_refused_total{at="` + at + `"}`)
	return v
}
