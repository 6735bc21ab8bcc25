package fsm

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"testing"
)

// TestShardsOnce: the first Shards entry chooses count and replicas; a later one changes
// nothing and is told what is in force; out-of-range values are refused.
func TestShardsOnce(t *testing.T) {
	var f FSM
	for _, bad := range []Shards{{0, 3}, {MaxShards + 1, 3}, {16, 0}, {16, MaxReplicas + 1}} {
		if r := applyEntry(&f, 1, Encode(bad)); r.err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if n, _ := f.Placement(); n != 0 {
		t.Fatalf("refused entries set %d replicas", n)
	}
	want := appendUvarint(appendUvarint(nil, 16), 3)
	if r := applyEntry(&f, 2, Encode(Shards{Count: 16, Replicas: 3})); r.err != nil || !bytes.Equal(r.data, want) {
		t.Fatalf("first: % x, %v", r.data, r.err)
	}
	if r := applyEntry(&f, 3, Encode(Shards{Count: 64, Replicas: 5})); r.err != nil || !bytes.Equal(r.data, want) {
		t.Fatalf("second: % x, %v; want the first's", r.data, r.err)
	}
	replicas, shards := f.Placement()
	if replicas != 3 || len(shards) != 16 {
		t.Fatalf("%d shards of %d replicas; want 16 of 3", len(shards), replicas)
	}
}

// TestPlacesCompareAndSet: a place applies only at the shard's epoch, with valid voters,
// and sets the epoch to its entry's index; ShardReady follows only the current epoch.
func TestPlacesCompareAndSet(t *testing.T) {
	var f FSM
	if r := applyEntry(&f, 1, Encode(Places{{Shard: 0, Voters: []string{"a"}}})); r.err == nil {
		t.Fatal("places before Shards accepted")
	}
	applyEntry(&f, 2, Encode(Shards{Count: 4, Replicas: 3}))
	r := applyEntry(&f, 10, Encode(Places{
		{Shard: 0, Epoch: 0, Voters: []string{"c", "a", "b"}},
		{Shard: 1, Epoch: 7, Voters: []string{"a"}},                // stale epoch
		{Shard: 2, Epoch: 0, Voters: []string{"a", "a"}},           // not distinct
		{Shard: 3, Epoch: 0, Voters: []string{"a", "b", "c", "d"}}, // more than the replicas
		{Shard: 4, Epoch: 0, Voters: []string{"a"}},                // no such shard
		{Shard: 3, Epoch: 0, Voters: []string{""}},                 // empty name
	}))
	if r.err != nil || !bytes.Equal(r.data, []byte{1, 0, 0, 0, 0, 0}) {
		t.Fatalf("applied % x, %v; want only the first", r.data, r.err)
	}
	_, shards := f.Placement()
	if got := shards[0]; !slices.Equal(got.Voters, []string{"a", "b", "c"}) || got.Epoch != 10 || got.Ready != 0 {
		t.Fatalf("shard 0: %+v", got)
	}
	for _, sh := range shards[1:] {
		if sh.Voters != nil || sh.Epoch != 0 {
			t.Fatalf("a refused place changed %+v", sh)
		}
	}
	if r := applyEntry(&f, 11, Encode(ShardReady{Shard: 0, Epoch: 9})); r.err != nil || r.data[0] != 0 {
		t.Fatalf("stale ready: % x, %v", r.data, r.err)
	}
	if r := applyEntry(&f, 12, Encode(ShardReady{Shard: 0, Epoch: 10})); r.err != nil || r.data[0] != 1 {
		t.Fatalf("ready: % x, %v", r.data, r.err)
	}
	// The next place must name epoch 10; it moves the epoch, so Ready lags again.
	if r := applyEntry(&f, 13, Encode(Places{{Shard: 0, Epoch: 0, Voters: []string{"d"}}})); r.data[0] != 0 {
		t.Fatal("a place at epoch 0 applied over epoch 10")
	}
	applyEntry(&f, 14, Encode(Places{{Shard: 0, Epoch: 10, Voters: []string{"a", "b", "d"}}}))
	if _, shards = f.Placement(); shards[0].Epoch != 14 || shards[0].Ready != 10 {
		t.Fatalf("after the move: %+v", shards[0])
	}
}

// TestPlacementSnapshot: the table survives a snapshot; a snapshot of a state without one
// has no placement section, so that a build that does not know it still restores it.
func TestPlacementSnapshot(t *testing.T) {
	var f FSM
	applyEntry(&f, 1, Encode(Identity{ID: idA}))
	if data := snapshotOf(t, &f); sectionOf(t, data, 5) {
		t.Fatal("a snapshot without placement has its section")
	}
	applyEntry(&f, 2, Encode(Shards{Count: 3, Replicas: 2}))
	applyEntry(&f, 3, Encode(Places{{Shard: 1, Voters: []string{"n2", "n1"}}}))
	applyEntry(&f, 4, Encode(ShardReady{Shard: 1, Epoch: 3}))
	data := snapshotOf(t, &f)
	var g FSM
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	r1, s1 := f.Placement()
	r2, s2 := g.Placement()
	if r1 != r2 || fmt.Sprint(s1) != fmt.Sprint(s2) {
		t.Fatalf("restored %d %v; want %d %v", r2, s2, r1, s1)
	}
	if s2[1].Ready != 3 || !slices.Equal(s2[1].Voters, []string{"n1", "n2"}) {
		t.Fatalf("shard 1 restored as %+v", s2[1])
	}
}

func snapshotOf(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return persist(t, snap)
}

// sectionOf reports whether the snapshot has the section, walking its sections.
func sectionOf(t *testing.T, data []byte, section byte) bool {
	t.Helper()
	r := &reader{b: data[1:]}
	for len(r.b) > 0 && r.err == nil {
		s := r.byte()
		r.string()
		if s == section {
			return true
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return false
}

// TestShardOf: ShardOf is FNV-1a as hash/fnv computes it, spreads ids evenly and
// allocates nothing.
func TestShardOf(t *testing.T) {
	counts := make([]int, 16)
	for i := range 16000 {
		id := fmt.Sprintf("device-%d", i)
		h := fnv.New64a()
		h.Write([]byte(id))
		s := ShardOf(id, 16)
		if s != int(h.Sum64()%16) {
			t.Fatalf("ShardOf(%q) = %d; hash/fnv says %d", id, s, h.Sum64()%16)
		}
		counts[s]++
	}
	for s, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("shard %d holds %d of 16,000 ids; want about 1,000", s, n)
		}
	}
	if a := testing.AllocsPerRun(100, func() { shardSink = ShardOf("device-42", 16) }); a != 0 {
		t.Errorf("ShardOf allocates %v times", a)
	}
}

// shardSink keeps ShardOf's result alive in TestShardOf's allocation count.
var shardSink int

// sim applies plans to a table as the leader and the shards' leaders would: each place,
// then each shard's ShardReady, until the planner has nothing to do. It returns the
// number of voter changes made after the first placement.
func sim(t *testing.T, f *FSM, index *uint64, members []Member, maxMoves int) int {
	t.Helper()
	moved := 0
	for round := range 1000 {
		replicas, shards := f.Placement()
		plan := PlanPlacement(replicas, shards, members, maxMoves)
		if len(plan) == 0 {
			return moved
		}
		if len(plan) > maxMoves {
			placed := 0
			for _, p := range plan {
				if p.Epoch != 0 {
					placed++
				}
			}
			if placed > maxMoves {
				t.Fatalf("round %d: %d moves; at most %d", round, placed, maxMoves)
			}
		}
		for _, p := range plan {
			if p.Epoch != 0 {
				old := shards[p.Shard].Voters
				if d := diff(old, p.Voters); d > 2 || (d == 2 && len(old) != len(p.Voters)) {
					t.Fatalf("shard %d: %v to %v changes more than one voter", p.Shard, old, p.Voters)
				}
				moved++
			}
		}
		*index++
		r := applyEntry(f, *index, Encode(plan))
		if r.err != nil || bytes.Contains(r.data, []byte{0}) {
			t.Fatalf("round %d: plan refused: % x, %v", round, r.data, r.err)
		}
		_, shards = f.Placement()
		for id, sh := range shards {
			if sh.Ready != sh.Epoch {
				*index++
				applyEntry(f, *index, Encode(ShardReady{Shard: id, Epoch: sh.Epoch}))
			}
		}
	}
	t.Fatal("the planner did not settle in 1,000 rounds")
	return 0
}

// diff is how many names are in one of a and b only.
func diff(a, b []string) int {
	n := 0
	for _, x := range a {
		if !slices.Contains(b, x) {
			n++
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			n++
		}
	}
	return n
}

func members(names ...string) []Member {
	ms := make([]Member, len(names))
	for i, n := range names {
		ms[i] = Member{Name: n, Live: true}
	}
	return ms
}

// load is how many shards each node is a voter of.
func load(f *FSM) map[string]int {
	_, shards := f.Placement()
	m := map[string]int{}
	for _, sh := range shards {
		for _, v := range sh.Voters {
			m[v]++
		}
	}
	return m
}

// TestPlanFirst: the first plan places every shard at once, replicas voters each (every
// node when there are fewer), evenly.
func TestPlanFirst(t *testing.T) {
	for _, tc := range []struct {
		nodes, replicas, shards int
	}{{1, 3, 16}, {2, 3, 16}, {3, 3, 16}, {5, 3, 64}, {9, 3, 256}} {
		var f FSM
		index := uint64(1)
		applyEntry(&f, index, Encode(Shards{Count: tc.shards, Replicas: tc.replicas}))
		var names []string
		for i := range tc.nodes {
			names = append(names, fmt.Sprintf("n%d", i+1))
		}
		if moved := sim(t, &f, &index, members(names...), 4); moved != 0 {
			t.Errorf("%+v: %d moves after the first placement", tc, moved)
		}
		want := min(tc.replicas, tc.nodes)
		_, shards := f.Placement()
		for id, sh := range shards {
			if len(sh.Voters) != want {
				t.Fatalf("%+v: shard %d has voters %v", tc, id, sh.Voters)
			}
		}
		mean := float64(tc.shards*want) / float64(tc.nodes)
		for n, c := range load(&f) {
			if float64(c) < 0.6*mean || float64(c) > 1.4*mean {
				t.Errorf("%+v: %s holds %d shards; the mean is %.1f", tc, n, c, mean)
			}
		}
	}
}

// TestPlanRepair: a failed node's shards move to the spare nodes, one voter at a time and
// at most maxMoves shards per plan; with no spare node they stay where they are; a node
// that left is dropped even without a replacement.
func TestPlanRepair(t *testing.T) {
	var f FSM
	index := uint64(1)
	applyEntry(&f, index, Encode(Shards{Count: 64, Replicas: 3}))
	ms := members("n1", "n2", "n3", "n4", "n5")
	sim(t, &f, &index, ms, 64)
	before := load(&f)["n3"]
	ms[2].Live = false
	moved := sim(t, &f, &index, ms, 5)
	if moved != before {
		t.Errorf("%d voter changes; n3 held %d shards", moved, before)
	}
	if n := load(&f)["n3"]; n != 0 {
		t.Errorf("n3 failed and still holds %d shards", n)
	}
	for id, sh := range placementOf(&f) {
		if len(sh.Voters) != 3 {
			t.Fatalf("shard %d has %v", id, sh.Voters)
		}
	}

	// Three nodes, one failed: no spare, nothing moves.
	var g FSM
	index = 1
	applyEntry(&g, index, Encode(Shards{Count: 16, Replicas: 3}))
	three := members("a", "b", "c")
	sim(t, &g, &index, three, 16)
	three[1].Live = false
	if moved := sim(t, &g, &index, three, 16); moved != 0 {
		t.Errorf("%d moves with no spare node", moved)
	}
	// b leaves the cluster for good: it is dropped, the groups shrink to two.
	if moved := sim(t, &g, &index, []Member{three[0], three[2]}, 16); moved != 16 {
		t.Errorf("%d moves after b left; want 16", moved)
	}
	for id, sh := range placementOf(&g) {
		if !slices.Equal(sh.Voters, []string{"a", "c"}) {
			t.Fatalf("shard %d has %v; want [a c]", id, sh.Voters)
		}
	}
}

// TestPlanJoin: a node that joins takes about its share of the shards, and only shards
// that move to it move.
func TestPlanJoin(t *testing.T) {
	var f FSM
	index := uint64(1)
	applyEntry(&f, index, Encode(Shards{Count: 128, Replicas: 3}))
	sim(t, &f, &index, members("n1", "n2", "n3", "n4"), 128)
	before := placementOf(&f)
	moved := sim(t, &f, &index, members("n1", "n2", "n3", "n4", "n5"), 3)
	got := load(&f)["n5"]
	if moved != got {
		t.Errorf("%d moves; n5 took %d: a move that does not go to the new node", moved, got)
	}
	share := 128 * 3 / 5
	if got < share*6/10 || got > share*14/10 {
		t.Errorf("n5 holds %d shards; its share is about %d", got, share)
	}
	for id, sh := range placementOf(&f) {
		if d := diff(before[id].Voters, sh.Voters); d != 0 && (d != 2 || !slices.Contains(sh.Voters, "n5")) {
			t.Fatalf("shard %d: %v to %v", id, before[id].Voters, sh.Voters)
		}
	}
}

// TestPlanWaitsForReady: a shard whose group has not followed its last place is not moved
// again.
func TestPlanWaitsForReady(t *testing.T) {
	var f FSM
	applyEntry(&f, 1, Encode(Shards{Count: 1, Replicas: 3}))
	applyEntry(&f, 2, Encode(Places{{Shard: 0, Voters: []string{"a", "b", "c"}}}))
	ms := []Member{{"a", true}, {"b", true}, {"c", false}, {"d", true}}
	replicas, shards := f.Placement()
	if plan := PlanPlacement(replicas, shards, ms, 8); len(plan) != 0 {
		t.Fatalf("planned %v before the shard was ready", plan)
	}
	applyEntry(&f, 3, Encode(ShardReady{Shard: 0, Epoch: 2}))
	replicas, shards = f.Placement()
	plan := PlanPlacement(replicas, shards, ms, 8)
	if len(plan) != 1 || !slices.Equal(plan[0].Voters, []string{"a", "b", "d"}) || plan[0].Epoch != 2 {
		t.Fatalf("plan %+v; want c replaced by d at epoch 2", plan)
	}
}

func placementOf(f *FSM) []ShardPlace {
	_, s := f.Placement()
	return s
}
