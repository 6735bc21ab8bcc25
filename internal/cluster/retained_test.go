package cluster

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// syncStore is a host whose retained store is a map, as the broker's index would hold
// it, that the test reads while Raft's goroutine writes it.
type syncStore struct {
	nopHost
	mu       sync.Mutex
	m        map[string]*session.Message
	replaced int
}

func (s *syncStore) ApplyRetained(topic []byte, m *session.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*session.Message{}
	}
	if m == nil {
		delete(s.m, string(topic))
		return
	}
	s.m[string(topic)] = m
}

func (s *syncStore) ReplaceRetained(each func(func([]byte, *session.Message) bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaced++
	s.m = map[string]*session.Message{}
	each(func(topic []byte, m *session.Message) bool {
		s.m[string(topic)] = m
		return true
	})
}

// payloads returns topic → payload, and how many times the set was replaced.
func (s *syncStore) payloads() (map[string]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, m := range s.m {
		out[k] = string(m.Payload())
	}
	return out, s.replaced
}

// startRetNode starts a node whose retained store is st.
func startRetNode(t *testing.T, k *conf.Cluster, st *syncStore) *testNode {
	t.Helper()
	return startNode(t, k, func(c *Cluster) { c.Attach(st) })
}

// retCluster starts three nodes with retained stores and waits until they formed; it
// returns them, their stores, the leader, and the index of a follower.
func retCluster(t *testing.T) (nodes []*testNode, stores []*syncStore, lead *testNode, follower int) {
	t.Helper()
	stores = []*syncStore{{}, {}, {}}
	for i, st := range stores {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].gossip()}
		}
		nodes = append(nodes, startRetNode(t, nodeConfig(t, fmt.Sprintf("n%d", i+1), 3, seeds...), st))
	}
	_, leader := waitFormed(t, nodes...)
	// Retained changes come from clients, whom a node serves only while it holds its
	// lease: a change handed to it before fails (owner_fence_watch.go).
	testenv.WaitFor(t, "every node to serve", func() bool {
		for _, n := range nodes {
			if ok, _ := n.Serving(); !ok {
				return false
			}
		}
		return true
	})
	for i, n := range nodes {
		if n.name == leader {
			lead = n
		} else {
			follower = i
		}
	}
	return nodes, stores, lead, follower
}

// retainDones records the dones of retained changes.
type retainDones struct {
	mu      sync.Mutex
	applied map[int]int // change → calls with applied
	failed  map[int]int // change → calls without
}

// done returns change i's done.
func (d *retainDones) done(i int) func(bool) {
	return func(applied bool) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.applied == nil {
			d.applied, d.failed = map[int]int{}, map[int]int{}
		}
		if applied {
			d.applied[i]++
		} else {
			d.failed[i]++
		}
	}
}

// calls returns how many times change i's done was called, applied and not.
func (d *retainDones) calls(i int) (applied, failed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applied[i], d.failed[i]
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRetainedJoinBySnapshot: retained changes handed to a follower reach every node's
// store, and a change is done on the node that handed it over only once its own store
// has it (what a held PUBACK waits for); a node that joins after the leader compacted
// its log gets the set by a snapshot, which replaces what its store held.
func TestRetainedJoinBySnapshot(t *testing.T) {
	nodes, stores, lead, fi := retCluster(t)
	follower := nodes[fi]

	want := map[string]string{}
	var dones retainDones
	for i := range 200 {
		topic := fmt.Sprintf("r/%d", i%150)
		payload := fmt.Sprintf("v%d", i)
		if i%10 == 9 {
			payload = "" // a clear
			delete(want, topic)
		} else {
			want[topic] = payload
		}
		follower.Retain(session.NewLocalMessage(topic, []byte(payload), 1, true), dones.done(i))
	}
	testenv.WaitFor(t, "the follower's last change done", func() bool { applied, _ := dones.calls(199); return applied > 0 })
	if got, _ := stores[fi].payloads(); !sameMap(got, want) {
		t.Fatalf("the follower's changes are done, but its store holds %d topics; want %d", len(got), len(want))
	}
	for i := range 200 {
		if applied, failed := dones.calls(i); applied != 1 || failed != 0 {
			t.Fatalf("change %d: done called %d times applied, %d not; want once applied", i, applied, failed)
		}
	}
	for i, st := range stores {
		testenv.WaitFor(t, fmt.Sprintf("n%d's store", i+1), func() bool {
			got, _ := st.payloads()
			return sameMap(got, want)
		})
	}

	// Compact the leader's log behind a snapshot, so that a new node must restore it.
	rc := lead.raft.ReloadableConfig()
	rc.TrailingLogs, rc.SnapshotInterval = 1, time.Hour
	if err := lead.raft.ReloadConfig(rc); err != nil {
		t.Fatal(err)
	}
	if err := lead.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	late := &syncStore{}
	late.m = map[string]*session.Message{"stale": session.NewLocalMessage("stale", []byte("x"), 0, true)}
	n4 := startRetNode(t, nodeConfig(t, "n4", 3, nodes[0].gossip()), late)
	waitFormed(t, append(nodes, n4)...)
	testenv.WaitFor(t, "the late node's store", func() bool {
		got, _ := late.payloads()
		return sameMap(got, want)
	})
	if _, replaced := late.payloads(); replaced == 0 {
		t.Fatal("the late node replayed the log: no snapshot was restored")
	}
	if n4.fsm.RetainedLen() != len(want) {
		t.Fatalf("the late node's set holds %d topics; want %d", n4.fsm.RetainedLen(), len(want))
	}
}

// TestRetainedNotTaken: a change the log does not take (a node that never forms a
// cluster: no leader) is counted as failed, never reaches the store, and its done is
// called once, not applied (the broker then closes the connection whose acknowledgement
// waited for it: broker.TestClusterRetainedNotTaken). A change still queued at Close is
// done not applied, and one handed over after Close at once.
func TestRetainedNotTaken(t *testing.T) {
	st := &syncStore{}
	c := startNode(t, nodeConfig(t, "alone", 3), func(c *Cluster) {
		c.Attach(st)
		c.ret.wait = 200 * time.Millisecond
	})
	var dones retainDones
	c.Retain(session.NewLocalMessage("r/x", []byte("v"), 1, true), dones.done(0))
	testenv.WaitFor(t, "the change's done", func() bool { _, failed := dones.calls(0); return failed > 0 })
	c.ret.mu.Lock()
	failed := c.ret.failed
	c.ret.mu.Unlock()
	if got, _ := st.payloads(); failed != 1 || len(got) != 0 {
		t.Fatalf("failed %d, store %v; want 1 failed and nothing stored", failed, got)
	}
	c.Retain(session.NewLocalMessage("r/y", []byte("v"), 1, true), dones.done(1))
	c.Retain(session.NewLocalMessage("r/z", []byte("v"), 1, true), dones.done(2))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Retain(session.NewLocalMessage("r/after", []byte("v"), 1, true), dones.done(3))
	for i := range 4 {
		if applied, failed := dones.calls(i); applied != 0 || failed != 1 {
			t.Fatalf("change %d: done called %d times applied, %d not; want once, not applied", i, applied, failed)
		}
	}
}

// TestRetainedFollowerNudge: a change handed to a follower with nothing after it is done
// there once the follower has appended an empty entry (a nudge) that carries the commit
// to it at once, rather than after raft's CommitTimeout; the nudge changes no set.
func TestRetainedFollowerNudge(t *testing.T) {
	nodes, stores, lead, fi := retCluster(t)
	follower := nodes[fi]
	var dones retainDones
	for i := range 3 {
		follower.Retain(session.NewLocalMessage(fmt.Sprintf("n/%d", i), []byte("v"), 1, true), dones.done(i))
		testenv.WaitFor(t, "the change done on the follower", func() bool { applied, _ := dones.calls(i); return applied == 1 })
	}
	follower.ret.mu.Lock()
	nudges := follower.ret.nudges
	follower.ret.mu.Unlock()
	if nudges == 0 {
		t.Fatal("the follower never nudged")
	}
	lead.ret.mu.Lock()
	leaderNudges := lead.ret.nudges
	lead.ret.mu.Unlock()
	if leaderNudges != 0 {
		t.Errorf("the leader nudged %d times; it applies its entries itself", leaderNudges)
	}
	for _, st := range stores {
		testenv.WaitFor(t, "every store with the three topics", func() bool {
			got, _ := st.payloads()
			return len(got) == 3
		})
	}
}

// TestRetainedQueueBound: while the log takes nothing (no leader), QoS 0 changes beyond
// the queue's bound are dropped and counted; QoS 1 changes are still queued (their
// publishers' windows bound them).
func TestRetainedQueueBound(t *testing.T) {
	c := startNode(t, nodeConfig(t, "alone", 3), func(c *Cluster) {
		c.Attach(&syncStore{})
		c.ret.wait, c.ret.bound = time.Minute, 1024
	})
	payload := []byte(strings.Repeat("p", 100))
	// The first change goes in flight and stays there (no leader); the rest queue.
	var dones retainDones
	c.Retain(session.NewLocalMessage("q/first", payload, 0, true), nil)
	testenv.WaitFor(t, "the first change in flight", func() bool {
		c.ret.mu.Lock()
		defer c.ret.mu.Unlock()
		return len(c.ret.queue) == 0
	})
	dropped := 0
	for i := range 40 {
		c.Retain(session.NewLocalMessage(fmt.Sprintf("q/%d", i), payload, 0, true), dones.done(i))
		if _, failed := dones.calls(i); failed == 1 { // at once: dropped
			dropped++
		}
	}
	c.Retain(session.NewLocalMessage("q/one", payload, 1, true), dones.done(40))
	if _, failed := dones.calls(40); failed != 0 {
		t.Fatal("a QoS 1 change was dropped")
	}
	c.ret.mu.Lock()
	counted, queue := c.ret.dropped, c.ret.queue
	c.ret.mu.Unlock()
	qos0 := 0
	for _, o := range queue[:len(queue)-1] {
		qos0 += o.Size()
	}
	last := queue[len(queue)-2].Size()
	if dropped == 0 || counted != uint64(dropped) || len(queue)-1 != 40-dropped || qos0 < 1024 || qos0-last >= 1024 {
		t.Fatalf("dropped %d (counted %d) of 40 QoS 0 changes, %d queued in %d bytes; want them queued up to the 1 KiB bound and the rest dropped",
			dropped, counted, len(queue)-1, qos0)
	}
}
