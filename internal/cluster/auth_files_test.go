package cluster

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

var (
	pwA  = auth.File{Block: "", Kind: auth.KindPassword, Data: []byte("alice:$2a$04$x\n")}
	aclA = auth.File{Block: "", Kind: auth.KindACL, Data: []byte("user alice\ntopic read a/#\n")}
	pwB  = auth.File{Block: "", Kind: auth.KindPassword, Data: []byte("bob:$2a$04$y\n")}
)

// fileKey is what a file is known by in the cluster: its block and kind.
type fileKey struct {
	block string
	kind  auth.FileKind
}

// fakeAuth is an authHost that keeps what it is given.
type fakeAuth struct {
	mu    sync.Mutex
	files map[fileKey][]byte
	calls int
}

func (h *fakeAuth) UseAuthFiles(files []auth.File, _ uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	h.files = map[fileKey][]byte{}
	for _, f := range files {
		h.files[fileKey{f.Block, f.Kind}] = f.Data
	}
}

func (h *fakeAuth) AuthDigest() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var sums []auth.FileSum
	for k, d := range h.files {
		sums = append(sums, auth.File{Block: k.block, Kind: k.kind, Data: d}.Sum())
	}
	return auth.Digest(sums)
}

func (h *fakeAuth) get(block string, kind auth.FileKind) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.files[fileKey{block, kind}]
}

// TestProposeAuth: three nodes in one process. The first seed becomes the cluster's and a
// later one adopts it; a follower's proposal (a file near the size bound, forwarded to
// the leader) is in force on the proposer when ProposeAuth returns and on every node
// after; the same files again propose nothing; a file over the bound is refused before
// anything is written; the digests gossiped agree.
func TestProposeAuth(t *testing.T) {
	hosts := []*fakeAuth{{}, {}, {}}
	host := func(i int) func(*Cluster) { return func(c *Cluster) { c.authf.host = hosts[i] } }
	n1 := startNode(t, nodeConfig(t, "n1", 3), host(0))
	n2 := startNode(t, nodeConfig(t, "n2", 3, n1.gossip()), host(1))
	n3 := startNode(t, nodeConfig(t, "n3", 3, n1.gossip()), host(2))
	nodes := []*testNode{n1, n2, n3}
	_, leader := waitFormed(t, nodes...)
	ctx := context.Background()

	if err := n1.SeedAuth(ctx, []auth.File{pwA, aclA}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hosts[0].get("", auth.KindPassword), pwA.Data) {
		t.Fatal("n1 does not enforce its seed when SeedAuth returns")
	}
	if err := n2.SeedAuth(ctx, []auth.File{pwB}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hosts[1].get("", auth.KindPassword), pwA.Data) {
		t.Fatalf("n2 enforces %q after its seed; want the cluster's %q", hosts[1].get("", auth.KindPassword), pwA.Data)
	}

	var follower *testNode
	var fh *fakeAuth
	for i, n := range nodes {
		if n.name != leader {
			follower, fh = n, hosts[i]
		}
	}
	big := auth.File{Block: "", Kind: auth.KindACL, Data: bytes.Repeat([]byte("# comment\n"), fsm.MaxAuthFile/10)}
	n, err := follower.ProposeAuth(ctx, []auth.File{pwB, big})
	if err != nil || n != 2 {
		t.Fatalf("%s: ProposeAuth = %d, %v; want 2 proposed", follower.name, n, err)
	}
	if !bytes.Equal(fh.get("", auth.KindACL), big.Data) {
		t.Fatal("the proposer does not enforce its files when ProposeAuth returns")
	}
	testenv.WaitFor(t, "every node enforcing the proposal", func() bool {
		for _, h := range hosts {
			if !bytes.Equal(h.get("", auth.KindPassword), pwB.Data) || !bytes.Equal(h.get("", auth.KindACL), big.Data) {
				return false
			}
		}
		return true
	})
	if n, err := n1.ProposeAuth(ctx, []auth.File{pwB, big}); err != nil || n != 0 {
		t.Errorf("the cluster's own files proposed again: %d, %v; want 0", n, err)
	}
	last, _ := n1.fsm.AuthFiles()
	over := auth.File{Block: "", Kind: auth.KindACL, Data: make([]byte, fsm.MaxAuthFile+1)}
	if _, err := n1.ProposeAuth(ctx, []auth.File{pwA, over}); err == nil || !strings.Contains(err.Error(), "at most 3145728") {
		t.Errorf("a file over the bound: %v", err)
	}
	if now, _ := n1.fsm.AuthFiles(); !bytes.Equal(now[0].Data, last[0].Data) {
		t.Error("a refused proposal changed the files")
	}
	testenv.WaitFor(t, "the same digest in force and gossiped everywhere", func() bool {
		want, _ := n1.replicatedAuthDigest()
		for _, n := range nodes {
			s := n.Status()
			if s.Auth.InForce != want || s.Auth.Replicated != want {
				return false
			}
			for _, m := range s.Members {
				if m.AuthDigest != want {
					return false
				}
			}
		}
		return true
	})
}
