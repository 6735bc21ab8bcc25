package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// In-process clusters: every node a Cluster with its own memberlist, Raft and rpc port, in
// one test process, on loopback (port 0) or on an in-memory network whose links a test
// cuts (memNet, net_mem_test.go). test/cluster runs the same scenarios, and the ones that
// need a process to die, with separate bifrost processes.

// logBuffer collects a node's log, safe for its goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type testNode struct {
	*Cluster
	name string
	logs *logBuffer
}

// nodeConfig is a cluster block for a node on loopback with free ports.
func nodeConfig(t testing.TB, name string, expect int, seeds ...string) *conf.Cluster {
	return &conf.Cluster{NodeName: name, Bind: "127.0.0.1:0", RPC: "127.0.0.1:0", Seeds: seeds,
		BootstrapExpect: expect, Dir: t.TempDir(), RedirectLoad: 0.9, Lease: conf.DefaultClusterLease,
		ClaimTimeout: conf.DefaultClusterClaimTimeout}
}

// startNode starts a node on k on loopback, after prepare (the stores, hosts and hooks a
// test hands a Cluster before Start); the test closes it at its end and prints its log if
// it failed.
func startNode(t *testing.T, k *conf.Cluster, prepare ...func(*Cluster)) *testNode {
	t.Helper()
	return startNodeOn(t, nil, k, prepare...)
}

// startNodeOn is startNode on the network nw; nil: loopback.
func startNodeOn(t *testing.T, nw Network, k *conf.Cluster, prepare ...func(*Cluster)) *testNode {
	t.Helper()
	logs := &logBuffer{}
	c, err := New(Options{Config: k, Network: nw,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range prepare {
		f(c)
	}
	n := &testNode{Cluster: c, name: k.NodeName, logs: logs}
	t.Cleanup(func() {
		_ = c.Close()
		if t.Failed() {
			t.Logf("log of %s:\n%s", n.name, logs)
		}
	})
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start %s: %v", k.NodeName, err)
	}
	return n
}

func (n *testNode) gossip() string { return n.ms.addr() }

// waitFormed waits until every node is formed, and checks they agree on one cluster id
// and one leader.
func waitFormed(t *testing.T, nodes ...*testNode) (id, leader string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := n.Wait(ctx); err != nil {
			t.Fatalf("%s not formed: %v", n.name, err)
		}
	}
	testenv.WaitFor(t, "one id and one leader on every node", func() bool {
		id, leader = nodes[0].ClusterID(), ""
		leaders := 0
		for _, n := range nodes {
			l, _ := n.Leader()
			if n.ClusterID() != id || leader != "" && l != leader {
				return false
			}
			leader = l
			if n.IsLeader() {
				leaders++
			}
		}
		return id != "" && leaders == 1
	})
	return id, leader
}

// voters returns the servers of n's Raft configuration as name=suffrage, sorted.
func configuration(n *testNode) string {
	var out []string
	for name, s := range n.suffrage() {
		out = append(out, name+"="+s)
	}
	return strings.Join(sortStrings(out), " ")
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// TestFormThree: three nodes with bootstrap_expect 3 form one cluster: one id, one
// leader, three voters; a follower's Apply is forwarded to the leader. On loopback and on
// the in-memory network.
func TestFormThree(t *testing.T) {
	t.Run("net=tcp", func(t *testing.T) { formThree(t, nil) })
	t.Run("net=mem", func(t *testing.T) { formThree(t, newMemNet()) })
}

func formThree(t *testing.T, lab *memNet) {
	n1 := startNodeOn(t, lab.node("n1"), nodeConfig(t, "n1", 3))
	n2 := startNodeOn(t, lab.node("n2"), nodeConfig(t, "n2", 3, n1.gossip()))
	n3 := startNodeOn(t, lab.node("n3"), nodeConfig(t, "n3", 3, n1.gossip()))
	id, leader := waitFormed(t, n1, n2, n3)
	for _, n := range []*testNode{n1, n2, n3} {
		if got := configuration(n); got != "n1=voter n2=voter n3=voter" {
			t.Errorf("%s: configuration %s", n.name, got)
		}
	}
	var follower *testNode
	for _, n := range []*testNode{n1, n2, n3} {
		if n.name != leader {
			follower = n
		}
	}
	// The identity is chosen once: a follower's identity entry, forwarded, is told the
	// id in force.
	res, err := follower.Apply(context.Background(), fsm.Identity{ID: newClusterID()})
	if err != nil || string(res) != id {
		t.Fatalf("forwarded Apply = %q, %v; want the cluster id %s", res, err, id)
	}
	if !strings.Contains(n1.logs.String()+n2.logs.String()+n3.logs.String(), "bootstrapped a new cluster") {
		t.Error("no node logged a bootstrap")
	}
}
