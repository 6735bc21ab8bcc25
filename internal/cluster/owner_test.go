package cluster

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// fakeHost records what the cluster asks of a node's broker, and hands over a session
// of its own making.
type fakeHost struct {
	nopHost
	name string
	mu   sync.Mutex
	// fenced: "id@epoch" per fenced id; handed: the ids handed over; selfFenced: calls.
	fenced     []string
	handed     []string
	selfFenced int
}

func (h *fakeHost) Fence(epoch uint64, ids []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		h.fenced = append(h.fenced, fmt.Sprintf("%s@%d", id, epoch))
	}
}

func (h *fakeHost) HandOver(cid string, epoch uint64, discard bool) broker.HandoverResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handed = append(h.handed, cid)
	return broker.HandoverResult{Outcome: broker.HandedOver, Image: []byte("session of " + cid + " from " + h.name)}
}

func (h *fakeHost) SelfFence() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.selfFenced++
}

func (h *fakeHost) snapshot() (fenced, handed []string, self int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.fenced), slices.Clone(h.handed), h.selfFenced
}

type claimOutcome struct {
	epoch   uint64
	moved   bool
	session string
	err     error
}

// claimWait claims cid on n and waits for the outcome.
func claimWait(t *testing.T, n *testNode, cid string) claimOutcome {
	t.Helper()
	ch := make(chan claimOutcome, 1)
	n.Claim(broker.Claimant{ClientID: cid, Identity: "2:l1" + cid}, func(o broker.ClaimResult) {
		ch <- claimOutcome{o.Epoch, o.Moved, string(o.Session), o.Err}
	})
	o := <-ch
	if o.err != nil {
		t.Fatalf("claim of %s on %s: %v", cid, n.name, o.err)
	}
	return o
}

// threeWithHosts forms three nodes, each with a fake host, and waits until each serves.
func threeWithHosts(t *testing.T) ([]*testNode, []*fakeHost) {
	t.Helper()
	return threeWithHostsOn(t, nil)
}

// threeWithHostsOn is threeWithHosts on lab; nil: loopback.
func threeWithHostsOn(t *testing.T, lab *memNet) ([]*testNode, []*fakeHost) {
	t.Helper()
	n1 := startNodeOn(t, lab.node("n1"), nodeConfig(t, "n1", 3))
	n2 := startNodeOn(t, lab.node("n2"), nodeConfig(t, "n2", 3, n1.gossip()))
	n3 := startNodeOn(t, lab.node("n3"), nodeConfig(t, "n3", 3, n1.gossip()))
	nodes := []*testNode{n1, n2, n3}
	var hosts []*fakeHost
	for _, n := range nodes {
		h := &fakeHost{name: n.name}
		n.Attach(h)
		hosts = append(hosts, h)
	}
	waitFormed(t, nodes...)
	testenv.WaitFor(t, "every node serving", func() bool {
		for _, n := range nodes {
			if ok, _ := n.Serving(); !ok {
				return false
			}
		}
		return true
	})
	return nodes, hosts
}

// TestClaimMoves: a client id claimed on one node, then on another: the second claim
// names the first owner, whose host hands the session over and is fenced; every node
// applies the same owner; a release by the old owner removes nothing.
func TestClaimMoves(t *testing.T) {
	nodes, hosts := threeWithHosts(t)
	n1, n2 := nodes[0], nodes[1]
	first := claimWait(t, n1, "x")
	if first.moved || first.session != "" || first.epoch == 0 {
		t.Fatalf("first claim: %+v", first)
	}
	second := claimWait(t, n2, "x")
	if !second.moved || second.session != "session of x from n1" || second.epoch <= first.epoch {
		t.Fatalf("second claim: %+v; want moved, n1's session, a higher epoch", second)
	}
	testenv.WaitFor(t, "every node applies n2's claim", func() bool {
		for _, n := range nodes {
			if node, e := n.Owner("x"); node != "n2" || e != second.epoch {
				return false
			}
		}
		return true
	})
	want := fmt.Sprintf("x@%d", second.epoch)
	for i, h := range hosts {
		fenced, handed, _ := h.snapshot()
		switch h.name {
		case "n2": // fenced by n1's claim only, before its own
			if slices.Contains(fenced, want) || len(handed) != 0 {
				t.Errorf("n2 (the new owner) fenced %v, handed over %v", fenced, handed)
			}
		default:
			if !slices.Contains(fenced, want) {
				t.Errorf("%s fenced %v; want %s", nodes[i].name, fenced, want)
			}
		}
		if h.name == "n1" && !slices.Equal(handed, []string{"x"}) {
			t.Errorf("n1 handed over %v; want [x]", handed)
		}
	}
	n1.Release("x", first.epoch) // stale: n2 owns x
	n2.Release("y", 1)           // owns nothing of y
	n2.Release("x", second.epoch)
	testenv.WaitFor(t, "n2's release applied", func() bool {
		node, _ := n1.Owner("x")
		return node == ""
	})
}

// TestClaimsBatch: concurrent claims on a follower go to the log in few entries.
func TestClaimsBatch(t *testing.T) {
	nodes, _ := threeWithHosts(t)
	var follower *testNode
	for _, n := range nodes {
		if !n.IsLeader() {
			follower = n
		}
	}
	const claims = 500
	before := follower.raft.LastIndex()
	var wg sync.WaitGroup
	var mu sync.Mutex
	epochs := map[uint64]int{}
	for i := range claims {
		wg.Add(1)
		follower.Claim(broker.Claimant{ClientID: fmt.Sprintf("c%d", i), Discard: true}, func(o broker.ClaimResult) {
			epoch, moved, err := o.Epoch, o.Moved, o.Err
			defer wg.Done()
			if err != nil || moved {
				t.Errorf("claim %d: moved %v, %v", i, moved, err)
			}
			mu.Lock()
			epochs[epoch]++
			mu.Unlock()
		})
	}
	wg.Wait()
	entries := follower.raft.LastIndex() - before
	if len(epochs) > claims/10 || entries > claims/10 {
		t.Fatalf("%d claims took %d entries (%d epochs); want batches of ten or more", claims, entries, len(epochs))
	}
	t.Logf("%d claims in %d entries", claims, len(epochs))
}

// TestLeaseSelfFence: a node that loses the leader (the other two stop) stops serving
// after the lease: its host is told to close every client, and Serving says no.
func TestLeaseSelfFence(t *testing.T) {
	nodes, hosts := threeWithHosts(t)
	alone, host := nodes[0], hosts[0]
	// The right to serve runs out by itself: a node paused for a lease (SIGSTOP) wakes
	// without it, before its lease watch runs again.
	now := time.Now()
	lease := time.Duration(alone.cfg.Lease)
	if !alone.ServingAt(now.UnixNano()) || alone.ServingAt(now.Add(lease).UnixNano()) {
		t.Fatal("the lease does not end a lease from now")
	}
	// Writes to clients end with the lease too, a fifth of a lease after serving does.
	if until, write := alone.own.fence.until.Load(), alone.own.fence.writeUntil.Load(); !alone.WritableAt(now.UnixNano()) ||
		alone.WritableAt(now.Add(lease).UnixNano()) || write < until {
		t.Fatalf("writes to clients end at %v, serving at %v, now %v; want between serving's end and a lease from now",
			time.Unix(0, write), time.Unix(0, until), now)
	}
	for _, n := range nodes[1:] {
		if err := n.raft.Shutdown().Error(); err != nil { // a failure, not a leave
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "the node alone fences itself", func() bool {
		_, _, self := host.snapshot()
		ok, _ := alone.Serving()
		return self == 1 && !ok
	})
}
