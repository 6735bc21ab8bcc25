package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
	"github.com/hashicorp/raft"
)

// applyEntry applies data at index to f as Raft would and returns its result.
func applyEntry(t testing.TB, f *fsm.FSM, index uint64, data []byte) []byte {
	t.Helper()
	res, err := fsm.Response(f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// claim applies a claims entry at index and decodes its result.
func claim(t testing.TB, f *fsm.FSM, index uint64, node string, ids ...string) (uint64, []fsm.Claimed) {
	t.Helper()
	res := applyEntry(t, f, index, fsm.Encode(fsm.Claims{Node: node, IDs: ids}))
	epoch, out, err := fsm.DecodeClaimed(res, len(ids), false)
	if err != nil {
		t.Fatal(err)
	}
	return epoch, out
}

// claimAsOf applies a claims entry with identities at index: each id claimed by identity
// who with mode, one each.
func claimAsOf(t testing.TB, f *fsm.FSM, index uint64, node string, mode fsm.ClaimMode, ids ...string) (uint64, []fsm.Claimed) {
	t.Helper()
	c := fsm.Claims{Node: node}
	for _, id := range ids {
		id, who, _ := strings.Cut(id, "/")
		c.IDs = append(c.IDs, id)
		c.As = append(c.As, fsm.ClaimAs{Who: fsm.WhoOf(who), Mode: mode})
	}
	res := applyEntry(t, f, index, fsm.Encode(c))
	epoch, out, err := fsm.DecodeClaimed(res, len(ids), true)
	if err != nil {
		t.Fatal(err)
	}
	return epoch, out
}

// TestClaimForeignNotFenced: a node applying another node's claims fences its
// connections of the ids taken, not of those refused; the result tells them apart
// without allocating when none was refused.
func TestClaimForeignNotFenced(t *testing.T) {
	c := &Cluster{}
	c.cfg.NodeName = "n1"
	c.fsm = fsm.New(fsm.Hooks{Applied: c.applied})
	h := &fakeHost{name: "n1"}
	c.Attach(h)
	claimAsOf(t, c.fsm, 1, "n1", fsm.TakeUnlessForeign, "x/alice", "z/alice")
	claimAsOf(t, c.fsm, 2, "n2", fsm.TakeUnlessForeign, "x/bob", "y/bob", "z/bob", "w/bob")
	if fenced, _, _ := h.snapshot(); !slices.Equal(fenced, []string{"y@2", "w@2"}) {
		t.Fatalf("fenced %v; want y@2 w@2 (x and z are alice's)", fenced)
	}
	if got := c.own.counts.fenced.Load(); got != 2 {
		t.Fatalf("fenced count %d; want 2", got)
	}
	cl := fsm.Claims{Node: "n2", IDs: []string{"a", "b"}, As: []fsm.ClaimAs{{Who: 1}, {Who: 1}}}
	res := applyEntry(t, c.fsm, 3, fsm.Encode(cl))
	if allocs := testing.AllocsPerRun(100, func() { _ = cl.Taken(res) }); allocs != 0 {
		t.Fatalf("taken allocates %v times with none refused", allocs)
	}
	if got := cl.Taken(res); !slices.Equal(got, cl.IDs) {
		t.Fatalf("taken %v", got)
	}
}
