package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// fullDiskSize is the tmpfs of a node's cluster.dir in these tests.
const fullDiskSize = 4 << 20

// TestFullDiskRestart: a node whose cluster.dir is full when it starts again (killed,
// then the disk filled) must not hang replaying its Raft log, which Pebble writes into a
// table before it opens: the start fails before anything listens, exiting 1 with one
// error that names the directory, what it was doing and the space, and Pebble's retries
// logged at a bounded rate. Once the file system has grown the node starts on its Raft
// state and rejoins its cluster.
func TestFullDiskRestart(t *testing.T) {
	mnt := testenv.Tmpfs(t, fullDiskSize)
	dir := filepath.Join(mnt, "cluster")
	c := newCluster(t, 3, func(i int, cfg *nodeConfig) {
		if i == 2 {
			cfg.ClusterYAML = fmt.Sprintf("    dir: %q\n", dir)
		}
	})
	c.start()
	id, _ := c.waitFormed()
	nd := c.node("n3")
	for i := range 20 { // claims in the Raft log, for n3's write-ahead log to replay
		ack, conn, err := nd.connect(fmt.Sprintf("full-%d", i), packet.V5)
		if err != nil || ack.Code != packet.Success {
			t.Fatalf("CONNECT to %s: %v, %v", nd.name, ack.Code, err)
		}
		conn.Close()
	}
	nd.kill()
	filler := fillDisk(t, mnt)

	err := nd.spawn()
	nd.mu.Lock()
	state := nd.cmd.ProcessState
	nd.mu.Unlock()
	run := lastStarted(nd.logs())
	if err == nil || state == nil {
		t.Fatalf("%s started on a full disk (%v); want it to exit:\n%s", nd.name, err, run)
	}
	t.Logf("start on the full disk: %v:\n%s", state, run)
	if code := state.ExitCode(); code != 1 {
		t.Errorf("exit code %d on a full disk, want 1", code)
	}
	for _, want := range []string{`msg="start failed"`, filepath.Join(dir, "raft") + ": no space left on device",
		"replaying the write-ahead log", "its file system has", "cluster.dir"} {
		if !strings.Contains(run, want) {
			t.Errorf("the start's log does not say %q", want)
		}
	}
	if strings.Contains(run, "listening") {
		t.Errorf("%s listened before its start failed", nd.name)
	}
	if n := strings.Count(run, "pebble: background error"); n > 2 {
		t.Errorf("%d background errors logged; want them limited", n)
	}

	testenv.ResizeTmpfs(t, mnt, 4*fullDiskSize)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	nd.start()
	if got, _ := c.waitFormed(); got != id {
		t.Fatalf("after %s started again: cluster %s; want %s", nd.name, got, id)
	}
	if run := lastRun(nd.logs()); strings.Contains(run, "bootstrapped a new cluster") || !strings.Contains(run, "raft_state=true") {
		t.Errorf("%s started again without its Raft state, or bootstrapped:\n%s", nd.name, run)
	}
}

// lastStarted is the log of a node's last run, with the line that says how it ended.
func lastStarted(log string) string {
	i := strings.LastIndex(log, ", pid ")
	if i < 0 {
		return log
	}
	return log[strings.LastIndex(log[:i], "---- run "):]
}

// fillDisk writes a file in dir until its file system is full, and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

// TestFullDiskElection: a node whose cluster.dir fills up while it runs, and whose Raft
// log writes fail for it, takes part in the election that follows when the leader is
// paused: it saves the new term and its vote (hashicorp/raft stopped the process, exit
// 2, "failed to save current term", when it could not), and does not exit. The others
// elect a leader and serve; once the file system has grown it catches up with their
// log and serves again.
func TestFullDiskElection(t *testing.T) {
	mnt := testenv.Tmpfs(t, fullDiskSize)
	dir := filepath.Join(mnt, "cluster")
	c := newCluster(t, 3, func(i int, cfg *nodeConfig) {
		if i == 2 {
			cfg.ClusterYAML = fmt.Sprintf("    dir: %q\n", dir)
		}
	})
	c.start()
	_, leader := c.waitFormed()
	nd := c.node("n3")
	if leader == nd.name { // so that n3 is a follower when its disk fills
		nd.stop()
		testenv.WaitFor(t, "a leader other than n3", func() bool {
			s, err := c.node("n1").status()
			return err == nil && s.Leader != "" && s.Leader != nd.name
		})
		nd.cont()
		_, leader = c.waitFormed()
	}
	paused, others := c.split(leader, true)
	var other *node
	for _, o := range others {
		if o != nd {
			other = o
		}
	}
	filler := fillDisk(t, mnt)
	for i := 0; ; i++ { // claims, until n3 cannot store the log's entries
		ack, conn, err := other.connect(fmt.Sprintf("full-%d", i), packet.V5)
		if err != nil || ack.Code != packet.Success {
			t.Fatalf("CONNECT %d to %s: %v, %v", i, other.name, ack.Code, err)
		}
		conn.Close()
		if l, s := paused.mustStatus(), nd.mustStatus(); l.LastIndex >= s.LastIndex+5 {
			t.Logf("n3's log at %d, the leader's at %d, after %d claims", s.LastIndex, l.LastIndex, i+1)
			break
		}
		if i == 2000 {
			t.Fatalf("n3's log keeps up after %d claims: its disk is not full", i)
		}
	}

	term := nd.mustStatus().Term
	paused.stop()
	testenv.WaitFor(t, other.name+" to lead, with n3's vote", func() bool {
		s, err := other.status()
		return err == nil && s.Leader == other.name && s.State == "Leader"
	})
	if s := nd.mustStatus(); s.Term <= term {
		t.Errorf("n3 in term %d after the election, was %d", s.Term, term)
	}
	paused.cont()
	c.waitFormed(paused, other)
	if !nd.running() {
		t.Fatalf("n3 exited after the election on its full disk:\n%s", lastStarted(nd.logs()))
	}
	run := lastRun(nd.logs())
	if strings.Contains(run, "panic") || strings.Contains(run, "the Raft term cannot be saved") {
		t.Errorf("n3 failed to save a term:\n%s", run)
	}
	t.Logf("n3 in term %d, up, on its full disk", nd.mustStatus().Term)

	testenv.ResizeTmpfs(t, mnt, 4*fullDiskSize)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.waitFormed()
	if s, l := nd.mustStatus(), c.node(leader).mustStatus(); s.Term != l.Term {
		t.Errorf("n3 in term %d, the others %d", s.Term, l.Term)
	}
}
