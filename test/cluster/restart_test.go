package cluster

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestRestart: nodes restarted on their data directories stay in their cluster. The
// leader killed (SIGKILL) leaves the other two to elect a leader of their own; started
// again it rejoins as a follower, bootstrapping nothing. Then every node killed and
// started again forms the same cluster (same id), and so does every node stopped
// gracefully (SIGTERM, all at once) and started again.
func TestRestart(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.start()
	id, leader := c.waitFormed()

	old := c.node(leader)
	old.kill()
	var rest []*node
	for _, nd := range c.nodes {
		if nd != old {
			rest = append(rest, nd)
		}
	}
	testenv.WaitFor(t, "a new leader among the other two", func() bool {
		for _, nd := range rest {
			if s, err := nd.status(); err != nil || s.State == "Leader" {
				return err == nil
			}
		}
		return false
	})
	old.start()
	if got, _ := c.waitFormed(); got != id {
		t.Fatalf("after %s restarted: cluster %s; want %s", old.name, got, id)
	}
	if run := lastRun(old.logs()); strings.Contains(run, "bootstrapped a new cluster") || !strings.Contains(run, "raft_state=true") {
		t.Errorf("%s restarted without its Raft state, or bootstrapped:\n%s", old.name, run)
	}

	for _, nd := range c.nodes {
		nd.kill()
	}
	c.start()
	if got, _ := c.waitFormed(); got != id {
		t.Fatalf("after every node was killed and started again: cluster %s; want %s", got, id)
	}

	done := make(chan struct{})
	for _, nd := range c.nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			nd.term()
		}()
	}
	for range c.nodes {
		<-done
	}
	c.start()
	if got, _ := c.waitFormed(); got != id {
		t.Fatalf("after every node was stopped and started again: cluster %s; want %s", got, id)
	}
}

// lastRun is the log of a node's last run.
func lastRun(log string) string {
	if i := strings.LastIndex(log, "---- run "); i >= 0 {
		return log[i:]
	}
	return log
}
