package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The conformance tests run hashicorp/raft itself on the Store: nodes over raft's
// in-memory transport, snapshots in a raft.FileSnapshotStore beside each node's log.

// countFSM is the trivial state machine of the conformance tests: it counts the commands
// it applies and folds their values, in order, into a hash, so that two nodes agree only
// if they applied the same commands in the same order.
type countFSM struct {
	mu      sync.Mutex
	n, hash uint64
}

func (f *countFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.hash = (f.hash ^ binary.BigEndian.Uint64(l.Data)) * 1099511628211
	return nil
}

func (f *countFSM) state() (n, hash uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, f.hash
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	n, hash := f.state()
	return countSnapshot{n, hash}, nil
}

func (f *countFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [16]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.n, f.hash = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	f.mu.Unlock()
	return nil
}

type countSnapshot struct{ n, hash uint64 }

func (s countSnapshot) Persist(sink raft.SnapshotSink) error {
	b := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, s.n), s.hash)
	if _, err := sink.Write(b); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (countSnapshot) Release() {}

// raftLog collects raft's log lines, shown only when the test fails: raft logs from its
// own goroutines, which may outlive a test's t.Log.
type raftLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *raftLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func newRaftLog(t *testing.T) hclog.Logger {
	l := &raftLog{}
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			t.Logf("raft's log:\n%s", l.buf.String())
			l.mu.Unlock()
		}
	})
	return hclog.New(&hclog.LoggerOptions{Output: l, Level: hclog.Info})
}

// node is one raft server of a test cluster, on its own directory.
type node struct {
	id    raft.ServerID
	dir   string
	store *Store
	trans *raft.InmemTransport
	fsm   *countFSM
	raft  *raft.Raft
}

// raftConfig is raft's test timing (its inmemConfig), snapshotting every 256 entries
// and keeping 64 behind, so that the log is compacted (DeleteRange at the front) many
// times in a run, and a node that was down long catches up with a snapshot.
func raftConfig(id raft.ServerID, log hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotThreshold = 256
	c.SnapshotInterval = 20 * time.Millisecond
	c.TrailingLogs = 64
	c.Logger = log.Named(string(id))
	return c
}

// startNode opens the store in dir/raft and starts raft on it. existing is what
// raft.HasExistingState must say of the directory.
func startNode(t *testing.T, id raft.ServerID, dir string, log hclog.Logger, existing bool) *node {
	t.Helper()
	n := &node{id: id, dir: dir, fsm: &countFSM{}}
	var err error
	if n.store, err = Open(filepath.Join(dir, "raft"), testLogger(t)); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, log.Named(string(id)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := raft.HasExistingState(n.store, n.store, snaps); err != nil || got != existing {
		t.Fatalf("%s: HasExistingState = %v, %v, want %v", id, got, err, existing)
	}
	_, n.trans = raft.NewInmemTransport(raft.ServerAddress(id))
	if n.raft, err = raft.NewRaft(raftConfig(id, log), n.fsm, n.store, n.store, snaps, n.trans); err != nil {
		t.Fatalf("%s: NewRaft: %v", id, err)
	}
	return n
}

// stopRaft shuts raft down, leaving the store open.
func (n *node) stopRaft(t *testing.T) {
	t.Helper()
	if n.raft == nil {
		return
	}
	if err := n.raft.Shutdown().Error(); err != nil {
		t.Errorf("%s: shutdown: %v", n.id, err)
	}
	n.raft = nil
}

// stop shuts raft down and closes the store.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.stopRaft(t)
	if err := n.store.Close(); err != nil {
		t.Errorf("%s: close: %v", n.id, err)
	}
}

// connect joins the transports of nodes, each to every other.
func connect(nodes ...*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.trans.Connect(raft.ServerAddress(b.id), b.trans)
			}
		}
	}
}

// leader waits for one of nodes to lead and returns it.
func leader(t *testing.T, nodes ...*node) *node {
	t.Helper()
	var l *node
	testenv.WaitFor(t, "a leader", func() bool {
		for _, n := range nodes {
			if n.raft.State() == raft.Leader {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

// apply applies count commands, with values from next on, through whichever of nodes
// leads, from 16 goroutines at once so that raft batches them. A command whose leader
// lost its leadership is applied again through the next leader; the nodes are compared
// with each other, not with a count.
func apply(t *testing.T, next, count uint64, nodes ...*node) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range uint64(16) {
		wg.Go(func() {
			for v := next + w; v < next+count; v += 16 {
				cmd := binary.BigEndian.AppendUint64(nil, v)
				var err error
				for try := 0; try < 50; try++ {
					var l *node
					for _, n := range nodes {
						if n.raft.State() == raft.Leader {
							l = n
						}
					}
					if l == nil {
						time.Sleep(5 * time.Millisecond) // an election is under way
						continue
					}
					if err = l.raft.Apply(cmd, 10*time.Second).Error(); err == nil ||
						!(errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost)) {
						break
					}
				}
				if err != nil {
					errs <- fmt.Errorf("apply %d: %w", v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// converged waits until every node has applied what the leader has, and returns the
// count.
func converged(t *testing.T, nodes ...*node) uint64 {
	t.Helper()
	var n uint64
	testenv.WaitFor(t, "every node to apply the leader's log", func() bool {
		l := leader(t, nodes...)
		if err := l.raft.Barrier(10 * time.Second).Error(); err != nil {
			return false
		}
		want, wantHash := l.fsm.state()
		for _, o := range nodes {
			if got, hash := o.fsm.state(); got != want || hash != wantHash {
				return false
			}
		}
		n = want
		return true
	})
	return n
}

// checkLogsMatch checks raft's Log Matching Property on the stores of stopped nodes:
// where two nodes both hold an index, they hold the same entry. A node's log may have a
// gap where it installed a snapshot, which raft.LogStore allows.
func checkLogsMatch(t *testing.T, nodes ...*node) {
	t.Helper()
	var lo, hi uint64 = 0, ^uint64(0)
	for _, n := range nodes {
		first, _ := n.store.FirstIndex()
		last, _ := n.store.LastIndex()
		lo, hi = max(lo, first), min(hi, last)
	}
	compared := 0
	for i := lo; i <= hi; i++ {
		var logs []raft.Log
		for _, n := range nodes {
			var l raft.Log
			err := n.store.GetLog(i, &l)
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: GetLog(%d): %v", n.id, i, err)
			}
			logs = append(logs, l)
		}
		for _, l := range logs[min(1, len(logs)):] {
			if l.Term != logs[0].Term || l.Type != logs[0].Type || !bytes.Equal(l.Data, logs[0].Data) {
				t.Fatalf("index %d: the nodes hold different entries: %+v", i, logs)
			}
			compared++
		}
	}
	if compared == 0 {
		t.Fatalf("no index held by two nodes in %d..%d", lo, hi)
	}
	t.Logf("logs match over %d..%d (%d comparisons)", lo, hi, compared)
}

// TestRaftSingleNode: raft starts on a fresh store (no current term, no vote, no log
// yet), bootstraps, elects itself and applies; restarted on the same directory it sees
// its state and leads again with what it applied.
func TestRaftSingleNode(t *testing.T) {
	dir := t.TempDir()
	log := newRaftLog(t)
	n := startNode(t, "n1", dir, log, false)
	defer n.stop(t)
	cfg := raft.Configuration{Servers: []raft.Server{{ID: n.id, Address: raft.ServerAddress(n.id)}}}
	if err := n.raft.BootstrapCluster(cfg).Error(); err != nil {
		t.Fatal(err)
	}
	leader(t, n)
	apply(t, 0, 100, n)
	want, wantHash := n.fsm.state()
	n.stop(t)

	n = startNode(t, "n1", dir, log, true)
	defer n.stop(t)
	leader(t, n)
	if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if got, hash := n.fsm.state(); got != want || hash != wantHash {
		t.Fatalf("after restart the FSM holds %d commands (hash %x), want %d (%x)", got, hash, want, wantHash)
	}
}

// TestRaftCluster runs 3 nodes on the Store, applies 3,000 commands, stops a follower,
// applies 1,000 more without it, restarts it on its directory and checks that it
// catches up (by a snapshot: the others compacted their logs past its last entry): every
// FSM the same, every log the same where they overlap, and every log compacted by
// snapshots on the way.
func TestRaftCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node raft cluster")
	}
	log := newRaftLog(t)
	var nodes []*node
	var servers []raft.Server
	for i := range 3 {
		id := raft.ServerID(fmt.Sprint("n", i+1))
		nodes = append(nodes, startNode(t, id, t.TempDir(), log, false))
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(id)})
	}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	connect(nodes...)
	if err := nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	leader(t, nodes...)
	apply(t, 0, 3000, nodes...)
	applied := converged(t, nodes...)
	if applied < 3000 {
		t.Fatalf("%d commands applied, want at least 3000", applied)
	}
	for _, n := range nodes {
		if first, _ := n.store.FirstIndex(); first <= 1 {
			t.Errorf("%s: FirstIndex %d: the log was never compacted", n.id, first)
		}
	}

	// Stop a follower; the other two go on.
	var down *node
	for _, n := range nodes {
		if n.raft.State() != raft.Leader {
			down = n
			break
		}
	}
	down.stopRaft(t)
	downLast, _ := down.store.LastIndex()
	if err := down.store.Close(); err != nil {
		t.Fatal(err)
	}
	var up []*node
	for _, n := range nodes {
		if n != down {
			n.trans.Disconnect(raft.ServerAddress(down.id))
			up = append(up, n)
		}
	}
	apply(t, 1_000_000, 1000, up...)
	if n := converged(t, up...); n < applied+1000 {
		t.Fatalf("%d commands applied by the two, want at least %d", n, applied+1000)
	}

	for _, n := range up { // so it catches up with a snapshot, not with entries
		if first, _ := n.store.FirstIndex(); first <= downLast+1 {
			t.Fatalf("%s: FirstIndex %d: not compacted past the stopped node's last entry %d", n.id, first, downLast)
		}
	}

	// Restart it on its directory.
	restarted := startNode(t, down.id, down.dir, log, true)
	if last, _ := restarted.store.LastIndex(); last != downLast {
		t.Errorf("%s: LastIndex after restart %d, was %d", down.id, last, downLast)
	}
	for i, n := range nodes {
		if n == down {
			nodes[i] = restarted
		}
	}
	connect(nodes...)
	converged(t, nodes...)
	// A few entries more, which every node appends to its log: one that caught up by a
	// snapshot alone may hold no entry the others kept through their compactions.
	apply(t, 2_000_000, 32, nodes...)
	converged(t, nodes...)
	for _, n := range nodes {
		n.stopRaft(t)
	}
	checkLogsMatch(t, nodes...)
}

// TestRaftFullDisk: a follower whose disk is full takes part in elections (leadership
// moved between the others, three times): raft saves each new term and vote on it,
// where hashicorp/raft would stop the process if it could not ("failed to save current
// term"). The others commit without it meanwhile, and once space is freed it catches up
// and holds the last term.
func TestRaftFullDisk(t *testing.T) {
	log := newRaftLog(t)
	full := testenv.Tmpfs(t, fullDiskSize)
	var nodes []*node
	var servers []raft.Server
	for i := range 3 {
		id := raft.ServerID(fmt.Sprint("n", i+1))
		dir := t.TempDir()
		if i == 2 {
			dir = full
		}
		nodes = append(nodes, startNode(t, id, dir, log, false))
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(id)})
	}
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	connect(nodes...)
	if err := nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	apply(t, 0, 100, nodes...)
	converged(t, nodes...)
	n3 := nodes[2]
	if leader(t, nodes...) == n3 {
		if err := n3.raft.LeadershipTransfer().Error(); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "a leader other than n3", func() bool { return leader(t, nodes...) != n3 })
	}

	filler := fill(t, full)
	for i := range 50 { // committed by the other two, until n3's log writes fail
		apply(t, uint64(10_000*(i+1)), 200, nodes...)
		if last, _ := n3.store.LastIndex(); last+100 < leader(t, nodes...).raft.LastIndex() {
			break
		}
	}
	for round := range 3 {
		term := leader(t, nodes...).raft.CurrentTerm()
		testenv.WaitFor(t, "the leadership to move", func() bool {
			l := leader(t, nodes...)
			if l.raft.CurrentTerm() > term {
				return true
			}
			to := nodes[0]
			if l == to {
				to = nodes[1]
			}
			_ = l.raft.LeadershipTransferToServer(to.id, raft.ServerAddress(to.id)).Error() // a timeout is tried again
			return false
		})
		testenv.WaitFor(t, "n3 to follow in the new term", func() bool {
			return n3.raft.CurrentTerm() > term && n3.raft.State() == raft.Follower
		})
		t.Logf("round %d: %s leads; n3, its disk full, in term %d", round, leader(t, nodes...).id, n3.raft.CurrentTerm())
		apply(t, uint64(1_000_000*(round+1)), 20, nodes...)
	}
	if last, _ := n3.store.LastIndex(); last >= nodes[0].raft.LastIndex() {
		t.Fatalf("n3 stored up to %d on its full disk, the leader %d: the disk was not full", last, nodes[0].raft.LastIndex())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	converged(t, nodes...) // n3 may catch up with a snapshot: then with entries too
	apply(t, 5_000_000, 100, nodes...)
	converged(t, nodes...)
	term := n3.raft.CurrentTerm()
	for _, n := range nodes {
		n.stopRaft(t)
	}
	if v, err := n3.store.GetUint64([]byte("CurrentTerm")); v != term || err != nil {
		t.Errorf("n3's CurrentTerm = %d, %v, want %d", v, err, term)
	}
	checkLogsMatch(t, nodes...)
}
