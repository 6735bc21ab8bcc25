package fsm

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
func claim(t testing.TB, f *FSM, index uint64, node string, ids ...string) (uint64, []Claimed) {
	t.Helper()
	r := applyEntry(f, index, Encode(Claims{Node: node, IDs: ids}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	epoch, out, err := DecodeClaimed(r.data, len(ids), false)
	if err != nil {
		t.Fatal(err)
	}
	return epoch, out
}

// claimAsOf applies a claims entry with identities at index: each id claimed by identity
// who with mode, one each.
func claimAsOf(t testing.TB, f *FSM, index uint64, node string, mode ClaimMode, ids ...string) (uint64, []Claimed) {
	t.Helper()
	c := Claims{Node: node}
	for _, id := range ids {
		id, who, _ := strings.Cut(id, "/")
		c.IDs = append(c.IDs, id)
		c.As = append(c.As, ClaimAs{Who: WhoOf(who), Mode: mode})
	}
	r := applyEntry(f, index, Encode(c))
	if r.err != nil {
		t.Fatal(r.err)
	}
	epoch, out, err := DecodeClaimed(r.data, len(ids), true)
	if err != nil {
		t.Fatal(err)
	}
	return epoch, out
}

// whoOwns returns the identity digest of cid's entry.
func (f *FSM) whoOwns(cid string) uint32 {
	f.omu.RLock()
	defer f.omu.RUnlock()
	return f.s.owners.m[keyOf(cid)].who()
}

func releaseAll(t testing.TB, f *FSM, index uint64, node string, rs ...Release) int {
	t.Helper()
	r := applyEntry(f, index, Encode(Releases{Node: node, IDs: rs}))
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
	if epoch != 5 || out[0] != (Claimed{}) {
		t.Fatalf("first claim: epoch %d, %+v; want 5 and no previous owner", epoch, out)
	}
	epoch, out = claim(t, &f, 7, "n2", "x", "y")
	if epoch != 7 || out[0] != (Claimed{Prev: "n1", PrevEpoch: 5}) || out[1] != (Claimed{}) {
		t.Fatalf("second claim: epoch %d, %+v", epoch, out)
	}
	_, out = claim(t, &f, 8, "n3", "x")
	if out[0] != (Claimed{Prev: "n2", PrevEpoch: 7}) {
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
	n := releaseAll(t, &f, 4, "n1", Release{"a", 1}, Release{"b", 1}, Release{"c", 1}, Release{"zz", 1}, Release{"zz", 0})
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
	if releaseAll(t, &f, 5, "n9", Release{"c", 3}) != 0 {
		t.Fatal("a node that owns nothing released an entry")
	}
	if releaseAll(t, &f, 6, "n2", Release{"c", 3}) != 1 || f.Owners() != 1 {
		t.Fatalf("owners %d after releasing c; want 1 (b)", f.Owners())
	}
}

// TestOwnersSnapshot: the table survives a snapshot and restore, and the snapshot is
// the table at Snapshot, not at Persist.
func TestOwnersSnapshot(t *testing.T) {
	var f FSM
	applyEntry(&f, 1, Encode(Identity{ID: idA}))
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
	body = append(body, 0, 0, 7)
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
	if releaseAll(t, &f, 5, "n2", Release{"b", 1 << 40}) != 1 {
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
		if v := packOwner(c[0], c[1], 1<<whoBits-1); v.node() != c[0] || v.epoch() != c[1] || v.who() != 1<<whoBits-1 {
			t.Errorf("node %d, epoch %d: read back %d, %d, %#x", c[0], c[1], v.node(), v.epoch(), v.who())
		}
	}
}

// TestClaimEncoding: a claim of one client id costs the node's name and the id, a few
// bytes more; commands decode to what was encoded.
func TestClaimEncoding(t *testing.T) {
	c := Claims{Node: "n1", IDs: []string{"client-0001"}}
	data := Encode(c)
	if want := 2 + 3 + 1 + 12; len(data) != want {
		t.Errorf("claim entry is %d bytes; want %d", len(data), want)
	}
	got, err := decodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(Claims); g.Node != c.Node || !slices.Equal(g.IDs, c.IDs) {
		t.Fatalf("decoded %+v", g)
	}
	rel := Releases{Node: "n2", IDs: []Release{{"a", 1 << 40}, {"b", 3}}}
	got, err = decodeCommand(Encode(rel))
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(Releases); g.Node != rel.Node || !slices.Equal(g.IDs, rel.IDs) {
		t.Fatalf("decoded %+v", g)
	}
	if _, err := decodeCommand([]byte{entryVersion, byte(kindClaim), 2, 'n', '1', 0xff, 0xff, 0x7f}); err == nil {
		t.Fatal("a claim of 2M ids decoded")
	}
}

// TestClaimForeign: a claim under foreign_session: refuse of an id whose entry names
// another identity is refused, on the owner's node or any other, and changes nothing:
// the entry keeps its node, epoch and identity, and the claim of the same identity still
// takes it. The result says which ids were refused.
func TestClaimForeign(t *testing.T) {
	var f FSM
	if _, out := claimAsOf(t, &f, 1, "n1", TakeUnlessForeign, "dev/alice"); out[0] != (Claimed{Named: true}) {
		t.Fatalf("alice's first claim: %+v; want named, no previous owner", out[0])
	}
	for i, node := range []string{"n2", "n1"} {
		epoch, out := claimAsOf(t, &f, uint64(2+i), node, TakeUnlessForeign, "dev/bob", "free"+node+"/bob")
		if epoch != uint64(2+i) || out[0] != (Claimed{Foreign: true}) || out[1] != (Claimed{Named: true}) {
			t.Fatalf("bob's claim on %s: epoch %d, %+v; want dev refused, free taken", node, epoch, out)
		}
		if n, e := f.Owner("dev"); n != "n1" || e != 1 || f.whoOwns("dev") != WhoOf("alice") {
			t.Fatalf("dev after bob's refused claim on %s: %s@%d, %#x; want alice's n1@1", node, n, e, f.whoOwns("dev"))
		}
	}
	_, out := claimAsOf(t, &f, 4, "n2", TakeUnlessForeign, "dev/alice")
	if out[0] != (Claimed{Prev: "n1", PrevEpoch: 1, Named: true}) {
		t.Fatalf("alice's claim on n2: %+v; want n1@1 before, named", out[0])
	}
	if n, e := f.Owner("dev"); n != "n2" || e != 4 {
		t.Fatalf("dev: %s@%d; want n2@4", n, e)
	}
}

// TestClaimIdentityKept: what identity each kind of claim leaves in the entry. One that
// may leave the session another's if its CONNECT fails after the claim (the session
// comes whole, or stays on the claimant's node) leaves it unknown, and an unknown entry
// refuses no one: the hand-over brings the session, the broker compares. Claims of an
// older build (no identities) leave it unknown too.
func TestClaimIdentityKept(t *testing.T) {
	var f FSM
	claimAsOf(t, &f, 1, "n1", TakeMoved, "a/alice", "b/alice", "c/alice", "d/alice")
	cases := []struct {
		index uint64
		node  string
		mode  ClaimMode
		id    string
		named bool   // the claimant's identity recorded
		who   string // the entry's identity after; "" unknown
	}{
		{2, "n2", TakeMoved, "a/bob", false, ""},           // the session moves whole
		{3, "n2", TakeDropped, "b/bob", true, "bob"},       // n1 drops alice's session
		{4, "n1", TakeDropped, "c/bob", false, ""},         // alice's stays on n1 until bob attaches
		{5, "n3", TakeUnlessForeign, "a/carol", false, ""}, // unknown: taken, still unknown
		{6, "n3", TakeUnlessForeign, "c/carol", false, ""},
		{7, "n1", TakeMoved, "d/alice", true, "alice"},       // the same identity again
		{8, "n1", TakeUnlessForeign, "e/dave", true, "dave"}, // no entry before
	}
	for _, c := range cases {
		_, out := claimAsOf(t, &f, c.index, c.node, c.mode, c.id)
		id, _, _ := strings.Cut(c.id, "/")
		want := uint32(whoUnknown)
		if c.who != "" {
			want = WhoOf(c.who)
		}
		if out[0].Foreign || out[0].Named != c.named || f.whoOwns(id) != want {
			t.Errorf("%s on %s, mode %d: %+v, entry %#x; want taken, named %v, entry %#x", c.id, c.node, c.mode, out[0], f.whoOwns(id), c.named, want)
		}
		if n, e := f.Owner(id); n != c.node || e != c.index {
			t.Errorf("%s: %s@%d; want %s@%d", c.id, n, e, c.node, c.index)
		}
	}
	// An older build's claim: the entry's owner is unknown, and refuses no one.
	claim(t, &f, 9, "n1", "d")
	if _, out := claimAsOf(t, &f, 10, "n2", TakeUnlessForeign, "d/erin"); out[0].Foreign || f.whoOwns("d") != whoUnknown {
		t.Fatalf("a refuse claim of an entry of an older build: %+v, entry %#x; want taken, unknown", out[0], f.whoOwns("d"))
	}
	// A release ends the claim it names, whatever its identity.
	if releaseAll(t, &f, 11, "n1", Release{"e", 8}) != 1 {
		t.Fatal("dave's claim not released")
	}
	if _, out := claimAsOf(t, &f, 12, "n2", TakeUnlessForeign, "e/erin"); out[0] != (Claimed{Named: true}) {
		t.Fatalf("a refuse claim of a released id: %+v; want taken, named", out[0])
	}
}

// TestAttachNames: an attach names the identity of an entry only while it is the claim
// named (node and epoch), and from then on the entry refuses other identities' claims
// under refuse.
func TestAttachNames(t *testing.T) {
	var f FSM
	claim(t, &f, 1, "n1", "a", "b") // an older build's: unknown owners
	apply := func(index uint64, node string, as ...Attach) int {
		t.Helper()
		r := applyEntry(&f, index, Encode(Attaches{Node: node, IDs: as}))
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
	alice := WhoOf("alice")
	if n := apply(2, "n1", Attach{"a", 1, alice}, Attach{"b", 7, alice}, Attach{"zz", 1, alice}); n != 1 {
		t.Fatalf("named %d; want 1 (a; b's epoch is not 7, zz has no entry)", n)
	}
	if n := apply(3, "n2", Attach{"b", 1, alice}); n != 0 {
		t.Fatal("n2 named n1's entry")
	}
	if f.whoOwns("a") != alice || f.whoOwns("b") != whoUnknown {
		t.Fatalf("identities %#x %#x", f.whoOwns("a"), f.whoOwns("b"))
	}
	if n, e := f.Owner("a"); n != "n1" || e != 1 {
		t.Fatalf("a: %s@%d; an attach changed the claim", n, e)
	}
	_, out := claimAsOf(t, &f, 4, "n2", TakeUnlessForeign, "a/bob", "b/bob")
	if !out[0].Foreign || out[1].Foreign {
		t.Fatalf("bob's claims after the attach: %+v; want a refused, b taken", out)
	}
	got, err := decodeCommand(Encode(Attaches{Node: "n1", IDs: []Attach{{"a", 1 << 40, alice}}}))
	if err != nil || !slices.Equal(got.(Attaches).IDs, []Attach{{"a", 1 << 40, alice}}) {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if _, err := decodeCommand(Encode(Attaches{Node: "n1", IDs: []Attach{{"a", 1, whoUnknown}}})); err == nil {
		t.Fatal("an attach of an unknown identity decoded")
	}
}

// TestClaimAsEncoding: a claim with an identity costs 4 bytes more per id; a claim
// without one, or with a mode beyond the known ones, does not decode.
func TestClaimAsEncoding(t *testing.T) {
	c := Claims{Node: "n1", IDs: []string{"client-0001"}, As: []ClaimAs{{Who: WhoOf("alice"), Mode: TakeUnlessForeign}}}
	data := Encode(c)
	if want := 2 + 3 + 1 + 12 + 4; len(data) != want || kind(data[1]) != kindClaimAs {
		t.Errorf("claim entry is %d bytes, kind %d; want %d, %d", len(data), data[1], want, kindClaimAs)
	}
	got, err := decodeCommand(data)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(Claims); g.Node != c.Node || !slices.Equal(g.IDs, c.IDs) || !slices.Equal(g.As, c.As) {
		t.Fatalf("decoded %+v", g)
	}
	for _, bad := range []ClaimAs{{Who: whoUnknown}, {Who: 5, Mode: maxClaimMode + 1}, {Who: 1 << whoBits}} {
		c.As[0] = bad
		if _, err := decodeCommand(Encode(c)); err == nil {
			t.Errorf("claim %+v decoded", bad)
		}
	}
	if WhoOf("") == whoUnknown || WhoOf("0:alice") == WhoOf("0:bob") {
		t.Fatal("identity digests")
	}
	if got, want := fmt.Sprintf("%06x", WhoOf("0:alice")), "5be0c0"; got != want {
		t.Fatalf("digest of 0:alice: %s; want %s (the same in every build)", got, want)
	}
}

// TestOwnersSnapshotIdentities: the entries' identities survive a snapshot; a version-2
// snapshot (before identities) restores its entries as unknown owners, who refuse no one.
func TestOwnersSnapshotIdentities(t *testing.T) {
	var f FSM
	claimAsOf(t, &f, 1, "n1", TakeUnlessForeign, "a/alice")
	claim(t, &f, 2, "n1", "b")
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	data := persist(t, snap)
	var g FSM
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if g.whoOwns("a") != WhoOf("alice") || g.whoOwns("b") != whoUnknown {
		t.Fatalf("restored identities %#x %#x", g.whoOwns("a"), g.whoOwns("b"))
	}
	if _, out := claimAsOf(t, &g, 3, "n2", TakeUnlessForeign, "a/bob"); !out[0].Foreign {
		t.Fatalf("bob's claim after the restore: %+v; want refused", out[0])
	}

	// Version 2: [nodes][entries]([key][node][epoch])...
	body := appendUvarint(nil, 1)
	body = appendString(body, "n1")
	body = appendUvarint(body, 1)
	k := keyOf("a")
	body = append(body, k[:]...)
	body = appendUvarint(body, 0)
	body = appendUvarint(body, 1)
	v2 := append([]byte{2, 2}, appendUvarint(nil, uint64(len(body)))...)
	v2 = append(v2, body...)
	var h FSM
	if err := h.Restore(io.NopCloser(bytes.NewReader(v2))); err != nil {
		t.Fatal(err)
	}
	if n, e := h.Owner("a"); n != "n1" || e != 1 || h.whoOwns("a") != whoUnknown {
		t.Fatalf("a from a version-2 snapshot: %s@%d, %#x; want n1@1, unknown", n, e, h.whoOwns("a"))
	}
	if _, out := claimAsOf(t, &h, 2, "n2", TakeUnlessForeign, "a/bob"); out[0].Foreign || out[0].Prev != "n1" {
		t.Fatalf("bob's claim of an entry from a version-2 snapshot: %+v; want taken from n1", out[0])
	}
}

// BenchmarkOwnerTableBytes measures what the ownership table costs per entry: the heap
// of n entries with 20-byte client ids from 5 nodes, and the snapshot's bytes. 2^20 is
// just past a doubling of the map's tables (its worst point), 1.7M just before one.
//
//	go test ./internal/cluster/fsm -run XXX -bench BenchmarkOwnerTableBytes -benchtime 1x
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
