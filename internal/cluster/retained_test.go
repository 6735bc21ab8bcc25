package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// syncStore is a mapStore that the test reads while Raft's goroutine writes it.
type syncStore struct {
	mu sync.Mutex
	mapStore
}

func (s *syncStore) ApplyRetained(topic []byte, m *session.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mapStore.ApplyRetained(topic, m)
}

func (s *syncStore) ReplaceRetained(each func(func([]byte, *session.Message) bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mapStore.ReplaceRetained(each)
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
func startRetNode(t *testing.T, k *conf.Cluster, st RetainedStore) *testNode {
	t.Helper()
	logs := &logBuffer{}
	c, err := New(Options{Config: k, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	c.SetRetainedStore(st)
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

func (n *testNode) retDone() uint64 {
	n.ret.mu.Lock()
	defer n.ret.mu.Unlock()
	return n.ret.done
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
	stores := []*syncStore{{}, {}, {}}
	n1 := startRetNode(t, nodeConfig(t, "n1", 3), stores[0])
	n2 := startRetNode(t, nodeConfig(t, "n2", 3, n1.gossip()), stores[1])
	n3 := startRetNode(t, nodeConfig(t, "n3", 3, n1.gossip()), stores[2])
	_, leader := waitFormed(t, n1, n2, n3)
	var follower, lead *testNode
	fi := 0
	for i, n := range []*testNode{n1, n2, n3} {
		if n.name == leader {
			lead = n
		} else {
			follower, fi = n, i
		}
	}

	want := map[string]string{}
	var last uint64
	for i := range 200 {
		topic := fmt.Sprintf("r/%d", i%150)
		payload := fmt.Sprintf("v%d", i)
		if i%10 == 9 {
			payload = "" // a clear
			delete(want, topic)
		} else {
			want[topic] = payload
		}
		last = follower.Retain(session.NewLocalMessage(topic, []byte(payload), 1, true))
	}
	testenv.WaitFor(t, "the follower's last change done", func() bool { return follower.retDone() >= last })
	if got, _ := stores[fi].payloads(); !sameMap(got, want) {
		t.Fatalf("the follower's changes are done, but its store holds %d topics; want %d", len(got), len(want))
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
	n4 := startRetNode(t, nodeConfig(t, "n4", 3, n1.gossip()), late)
	waitFormed(t, n1, n2, n3, n4)
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
