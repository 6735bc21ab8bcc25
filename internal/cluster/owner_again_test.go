package cluster

import (
	"context"
	"slices"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

// TestClaimAppliedTwice: a batch sent twice (its first outcome lost with a leader that
// stopped answering) is applied twice; its outcome is the first application's, as this
// node's FSM saw it: the previous owners the second one hides (it names this node).
// Without the first application seen here, an id that the second says this node claimed
// since the batch was first sent has an unknown previous owner.
func TestClaimAppliedTwice(t *testing.T) {
	c := &Cluster{}
	c.cfg.NodeName = "n1"
	c.fsm = fsm.New(fsm.Hooks{Applied: c.applied})
	claim(t, c.fsm, 5, "n2", "x", "y")
	claim(t, c.fsm, 6, "n1", "y")
	ids := []string{"x", "y", "z"}
	tr := c.own.traces.trace(ids, 6)
	claim(t, c.fsm, 7, "n3", "q")
	claim(t, c.fsm, 8, "n1", ids...) // the first attempt: its outcome never came
	epoch, out := claim(t, c.fsm, 9, "n1", ids...)
	if !slices.Equal(out, []fsm.Claimed{{Prev: "n1", PrevEpoch: 8}, {Prev: "n1", PrevEpoch: 8}, {Prev: "n1", PrevEpoch: 8}}) {
		t.Fatalf("second application's outcome %v", out)
	}
	got := c.firstOutcome(context.Background(), tr, epoch, out, false)
	c.own.traces.end(tr)
	if want := []fsm.Claimed{{Prev: "n2", PrevEpoch: 5}, {Prev: "n1", PrevEpoch: 6}, {}}; !slices.Equal(got, want) {
		t.Errorf("outcome of the batch applied twice: %v; want %v", got, want)
	}

	// The first application not seen here: the second is the first this node saw.
	claim(t, c.fsm, 10, "n2", "x")
	claim(t, c.fsm, 11, "n1", "x", "y") // before the trace: as if in a snapshot
	tr = c.own.traces.trace([]string{"x", "y"}, 10)
	epoch, out = claim(t, c.fsm, 12, "n1", "x", "y")
	got = c.firstOutcome(context.Background(), tr, epoch, out, false)
	c.own.traces.end(tr)
	if want := []fsm.Claimed{{Prev: unknownOwner}, {Prev: unknownOwner}}; !slices.Equal(got, want) {
		t.Errorf("outcome without the first application: %v; want %v", got, want)
	}
	if len(c.own.traces.live) != 0 {
		t.Errorf("%d traces left", len(c.own.traces.live))
	}
}
