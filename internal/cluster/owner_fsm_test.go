package cluster

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// claim applies a claims entry at index and decodes its result.
func claim(t testing.TB, f *FSM, index uint64, node string, ids ...string) (uint64, []claimed) {
	t.Helper()
	r := applyEntry(f, index, encodeCommand(claims{node: node, ids: ids}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	epoch, out, err := decodeClaimed(r.data, len(ids))
	if err != nil {
		t.Fatal(err)
	}
	return epoch, out
}

func releaseAll(t testing.TB, f *FSM, index uint64, node string, rs ...release) int {
	t.Helper()
	r := applyEntry(f, index, encodeCommand(releases{node: node, ids: rs}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	rd := &reader{b: r.data}
	n := rd.uvarint()
	if err := rd.end(); err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// TestClaimChain: each claim returns the previous owner and its epoch, and takes the
// entry's index as its epoch; the last claim in log order owns the id.
func TestClaimChain(t *testing.T) {
	var f FSM
	epoch, out := claim(t, &f, 5, "n1", "x")
	if epoch != 5 || out[0] != (claimed{}) {
		t.Fatalf("first claim: epoch %d, %+v; want 5 and no previous owner", epoch, out)
	}
	epoch, out = claim(t, &f, 7, "n2", "x", "y")
	if epoch != 7 || out[0] != (claimed{prev: "n1", prevEpoch: 5}) || out[1] != (claimed{}) {
		t.Fatalf("second claim: epoch %d, %+v", epoch, out)
	}
	_, out = claim(t, &f, 8, "n3", "x")
	if out[0] != (claimed{prev: "n2", prevEpoch: 7}) {
		t.Fatalf("third claim: %+v", out)
	}
	if n, e := f.Owner("x"); n != "n3" || e != 8 {
		t.Fatalf("owner of x: %s at %d; want n3 at 8", n, e)
	}
	if n, e := f.Owner("y"); n != "n2" || e != 7 {
		t.Fatalf("owner of y: %s at %d; want n2 at 7", n, e)
	}
	if got := f.ownedBy("n2"); got != 1 {
		t.Fatalf("n2 owns %d ids; want 1 (y)", got)
	}
}

// TestRelease: a release removes the entry only if it names the claim in force (owner
// and epoch), so a late release never removes a newer claim.
func TestRelease(t *testing.T) {
	var f FSM
	claim(t, &f, 1, "n1", "a", "b", "c")
	claim(t, &f, 2, "n1", "b") // b claimed again by n1: epoch 2
	claim(t, &f, 3, "n2", "c") // c moved to n2
	n := releaseAll(t, &f, 4, "n1", release{"a", 1}, release{"b", 1}, release{"c", 1}, release{"zz", 1}, release{"zz", 0})
	if n != 1 {
		t.Fatalf("removed %d; want 1 (a)", n)
	}
	if node, _ := f.Owner("a"); node != "" {
		t.Fatalf("a still owned by %q", node)
	}
	if node, e := f.Owner("b"); node != "n1" || e != 2 {
		t.Fatalf("b: %s at %d; a stale release removed the newer claim", node, e)
	}
	if node, _ := f.Owner("c"); node != "n2" {
		t.Fatalf("c: %s; n1's release removed n2's claim", node)
	}
	if releaseAll(t, &f, 5, "n9", release{"c", 3}) != 0 {
		t.Fatal("a node that owns nothing released an entry")
	}
	if releaseAll(t, &f, 6, "n2", release{"c", 3}) != 1 || f.Owners() != 1 {
		t.Fatalf("owners %d after releasing c; want 1 (b)", f.Owners())
	}
}

// TestOwnersSnapshot: the table survives a snapshot and restore, and the snapshot is
// the table at Snapshot, not at Persist.
func TestOwnersSnapshot(t *testing.T) {
	var f FSM
	applyEntry(&f, 1, encodeCommand(identity{id: idA}))
	claim(t, &f, 2, "n1", "a", "b")
	claim(t, &f, 3, "n2", "b", "c")
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	claim(t, &f, 4, "n3", "a") // after Snapshot: not in it
	data := persist(t, snap)

	var g FSM
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"a": "n1@2", "b": "n2@3", "c": "n2@3"} {
		if n, e := g.Owner(id); fmt.Sprintf("%s@%d", n, e) != want {
			t.Errorf("restored %s: %s@%d; want %s", id, n, e, want)
		}
	}
	if g.ClusterID() != idA || g.Owners() != 3 {
		t.Fatalf("restored id %q, %d owners", g.ClusterID(), g.Owners())
	}
	// The restored node table keeps numbering: a new node gets a new number.
	claim(t, &g, 5, "n4", "d")
	if n, _ := g.Owner("d"); n != "n4" {
		t.Fatalf("d: %s", n)
	}
	if n, _ := g.Owner("b"); n != "n2" {
		t.Fatalf("b after a new node: %s", n)
	}
}

// TestOwnersBadSnapshot: an ownership section naming a node outside its table is refused.
func TestOwnersBadSnapshot(t *testing.T) {
	body := appendUvarint(nil, 1)
	body = appendString(body, "n1")
	body = appendUvarint(body, 1)
	k := keyOf("x")
	body = append(body, k[:]...)
	body = appendUvarint(body, 3) // node 3 of 1
	body = appendUvarint(body, 9)
	data := append([]byte{snapshotVersion, 2}, appendUvarint(nil, uint64(len(body)))...)
	data = append(data, body...)
	var f FSM
	claim(t, &f, 1, "n1", "keep")
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err == nil || !strings.Contains(err.Error(), "node 3") {
		t.Fatalf("restored an entry of an unknown node: %v", err)
	}
	if n, _ := f.Owner("keep"); n != "n1" {
		t.Fatal("a refused snapshot changed the table")
	}
}

// TestOwnersSnapshotV1: a node restarted on a snapshot of the previous format (version
// 1: entries by client id) restores the same owners.
func TestOwnersSnapshotV1(t *testing.T) {
	body := appendUvarint(nil, 2)
	body = appendString(body, "n1")
	body = appendString(body, "n2")
	body = appendUvarint(body, 2)
	for _, e := range []struct {
		id          string
		node, epoch uint64
	}{{"a", 0, 4}, {"b", 1, 1 << 40}} {
		body = appendString(body, e.id)
		body = appendUvarint(body, e.node)
		body = appendUvarint(body, e.epoch)
	}
	data := append([]byte{1, 2}, appendUvarint(nil, uint64(len(body)))...)
	data = append(data, body...)
	var f FSM
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if n, e := f.Owner("a"); n != "n1" || e != 4 {
		t.Errorf("a: %s at %d; want n1 at 4", n, e)
	}
	if n, e := f.Owner("b"); n != "n2" || e != 1<<40 {
		t.Errorf("b: %s at %d; want n2 at 2^40", n, e)
	}
	if f.Owners() != 2 {
		t.Errorf("%d owners; want 2", f.Owners())
	}
	if releaseAll(t, &f, 5, "n2", release{"b", 1 << 40}) != 1 {
		t.Error("the release of a restored claim removed nothing")
	}
}

// TestOwnerKey: an id's key is the same on every node and in every build (every node
// applies the same log to its own table, and snapshots move keys between nodes): the
// first 12 bytes of SHA-256, no seed.
func TestOwnerKey(t *testing.T) {
	if got, want := fmt.Sprintf("%x", keyOf("client-1")), "5704de18fc6045e4d08c3a26"; got != want {
		t.Fatalf("key of client-1: %s; want %s", got, want)
	}
	if keyOf("a") == keyOf("b") || keyOf("") == keyOf("\x00") {
		t.Fatal("distinct ids share a key")
	}
}

// TestOwnerVal: an entry's two halves keep the node number and the epoch whole, at the
// ends of their ranges.
func TestOwnerVal(t *testing.T) {
	for _, c := range [][2]uint64{{0, 1}, {maxNodes - 1, epochMask}, {1, 1 << 32}, {7, 1<<32 - 1}} {
		if v := packOwner(c[0], c[1]); v.node() != c[0] || v.epoch() != c[1] {
			t.Errorf("node %d, epoch %d: read back %d, %d", c[0], c[1], v.node(), v.epoch())
		}
	}
}

// TestClaimEncoding: a claim of one client id costs the node's name and the id, a few
// bytes more; commands decode to what was encoded.
func TestClaimEncoding(t *testing.T) {
	c := claims{node: "n1", ids: []string{"client-0001"}}
	data := encodeCommand(c)
	if want := 2 + 3 + 1 + 12; len(data) != want {
		t.Errorf("claim entry is %d bytes; want %d", len(data), want)
	}
	got, err := decodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(claims); g.node != c.node || !slices.Equal(g.ids, c.ids) {
		t.Fatalf("decoded %+v", g)
	}
	rel := releases{node: "n2", ids: []release{{"a", 1 << 40}, {"b", 3}}}
	got, err = decodeCommand(encodeCommand(rel))
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(releases); g.node != rel.node || !slices.Equal(g.ids, rel.ids) {
		t.Fatalf("decoded %+v", g)
	}
	if _, err := decodeCommand([]byte{entryVersion, byte(kindClaim), 2, 'n', '1', 0xff, 0xff, 0x7f}); err == nil {
		t.Fatal("a claim of 2M ids decoded")
	}
}

// BenchmarkOwnerTableBytes measures what the ownership table costs per entry: the heap
// of n entries with 20-byte client ids from 5 nodes, and the snapshot's bytes. 2^20 is
// just past a doubling of the map's tables (its worst point), 1.7M just before one.
//
//	go test ./internal/cluster -run XXX -bench BenchmarkOwnerTableBytes -benchtime 1x
func BenchmarkOwnerTableBytes(b *testing.B) {
	for _, n := range []int{1 << 20, 1700 << 10} {
		b.Run(fmt.Sprintf("Entries=%d", n), func(b *testing.B) { benchOwnerTable(b, n) })
	}
}

func benchOwnerTable(b *testing.B, n int) {
	const batch = 1024
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%013d", i)
	}
	for range b.N {
		var f FSM
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < n; i += batch {
			claim(b, &f, uint64(i/batch+1), fmt.Sprintf("n%d", i/batch%5), ids[i:min(i+batch, n)]...)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		data := persist(b, snap)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/entry")
		b.ReportMetric(float64(len(data))/float64(n), "snapshot-B/entry")
		runtime.KeepAlive(&f)
	}
}

// TestOwnerBesideApply: Owner answers while an Apply holds the FSM's lock. The broker asks
// it under its own lock, which an Apply may wait for (a retained message's commit may
// restage the broker's sessions): Owner waiting for the FSM's lock would close the cycle.
func TestOwnerBesideApply(t *testing.T) {
	var f FSM
	claim(t, &f, 1, "n1", "x")
	f.mu.Lock() // an Apply of another part, in progress
	defer f.mu.Unlock()
	done := make(chan string)
	go func() {
		n, _ := f.Owner("x")
		done <- n
	}()
	select {
	case n := <-done:
		if n != "n1" {
			t.Fatalf("owner of x: %q; want n1", n)
		}
	case <-time.After(10 * time.Second): // a bound on a deadlock, not a wait for an event
		t.Fatal("Owner waits for the FSM's lock")
	}
}
