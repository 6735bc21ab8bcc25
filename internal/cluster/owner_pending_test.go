package cluster

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

// TestOwnerAheadOfLog: on a follower, a claim of this node whose outcome the leader has
// told is this node's in Owner before the local FSM applies it, while earlier claims of
// other nodes are applied here (their fences must spare the connection); once the local
// FSM has it, the record goes and the table answers.
func TestOwnerAheadOfLog(t *testing.T) {
	c := &Cluster{}
	c.cfg.NodeName = "n1"
	c.fsm = fsm.New(fsm.Hooks{Applied: c.applied})
	claim(t, c.fsm, 5, "n2", "x")
	c.own.pending.add(7, []string{"x"}) // n1's claim at 7, applied on the leader
	if n, e := c.Owner("x"); n != "n1" || e != 7 {
		t.Fatalf("owner of x with n1's claim ahead of the log: %s@%d; want n1@7", n, e)
	}
	claim(t, c.fsm, 6, "n3", "x") // applied here after n1's outcome, before its entry
	if n, e := c.Owner("x"); n != "n1" || e != 7 {
		t.Fatalf("owner of x after n3's earlier claim: %s@%d; want n1@7", n, e)
	}
	claim(t, c.fsm, 7, "n1", "x")
	if n, e := c.Owner("x"); n != "n1" || e != 7 {
		t.Fatalf("owner of x once applied here: %s@%d; want n1@7", n, e)
	}
	if len(c.own.pending.byID) != 0 || len(c.own.pending.batches) != 0 {
		t.Fatalf("pending after the local apply: %v", c.own.pending.byID)
	}
	claim(t, c.fsm, 8, "n2", "x")
	c.own.pending.add(7, []string{"x"}) // an outcome told after the local FSM applied it
	if n, e := c.Owner("x"); n != "n2" || e != 8 {
		t.Fatalf("owner of x after n2's later claim: %s@%d; want n2@8", n, e)
	}
}
