package session

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestSizes pins the size of the structs every idle connection pays for: a Session, and a
// Sub per subscription. Growing them costs memory on every connection (DESIGN.md, the
// memory model); change these numbers only on purpose.
func TestSizes(t *testing.T) {
	if n := unsafe.Sizeof(Session{}); n > 128 {
		t.Errorf("Session is %d bytes, want at most 128 (a malloc size class)", n)
	}
	if n := unsafe.Sizeof(Sub{}); n != 24 {
		t.Errorf("Sub is %d bytes, want 24", n)
	}
	if n := unsafe.Sizeof(subSet{}); n != 32 {
		t.Errorf("subSet is %d bytes, want 32", n)
	}
	if n := unsafe.Sizeof(flows{}); n > 128 {
		t.Errorf("flows is %d bytes, want at most 128", n)
	}
}

// TestSubsMany: a session's subscriptions stay right through adds, replacements and
// removals on either side of the size at which the set indexes itself, compared with a
// map; HasRoom agrees; the index is built when the set grows and dropped when it shrinks.
func TestSubsMany(t *testing.T) {
	s := New(1, "c", testLimits())
	want := map[string]uint32{}
	check := func(what string) {
		t.Helper()
		got := map[string]uint32{}
		for _, sub := range s.Subs() {
			if _, dup := got[sub.Filter]; dup {
				t.Fatalf("%s: %q twice", what, sub.Filter)
			}
			got[sub.Filter] = sub.ID
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: subscriptions %v, want %v", what, got, want)
		}
		ss := s.subs
		switch {
		case len(want) == 0 && ss != nil:
			t.Fatalf("%s: an empty set kept", what)
		case ss == nil:
		case len(ss.list) >= subIndexAt && ss.index == nil:
			t.Fatalf("%s: %d subscriptions without an index", what, len(ss.list))
		case ss.index != nil:
			if len(ss.index) != len(ss.list) {
				t.Fatalf("%s: index of %d for %d subscriptions", what, len(ss.index), len(ss.list))
			}
			for f, i := range ss.index {
				if ss.list[i].Filter != f {
					t.Fatalf("%s: index says %q at %d, list has %q", what, f, i, ss.list[i].Filter)
				}
			}
		}
		for f := range want {
			if !s.HasRoom([]byte(f), len(want)) {
				t.Fatalf("%s: no room to replace %q", what, f)
			}
		}
		if s.HasRoom([]byte("new"), len(want)) && len(want) > 0 {
			t.Fatalf("%s: room for a new filter at the cap", what)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	filter := func(n int) string { return fmt.Sprintf("f/%d", n) }
	for round, size := range []int{3, subIndexAt - 1, subIndexAt, 100, 5, 300, 0} {
		for len(want) < size {
			f := filter(r.IntN(1000))
			id := uint32(r.IntN(1 << 20))
			_, had := want[f]
			if replaced := s.AddSub(Sub{Filter: f, ID: id}); replaced != had {
				t.Fatalf("AddSub(%q) replaced %v, want %v", f, replaced, had)
			}
			want[f] = id
		}
		for f := range want { // replace a few
			if r.IntN(4) == 0 {
				want[f]++
				if !s.AddSub(Sub{Filter: f, ID: want[f]}) {
					t.Fatalf("AddSub(%q) again did not replace", f)
				}
			}
		}
		check(fmt.Sprintf("round %d, grown to %d", round, size))
		keys := make([]string, 0, len(want))
		for f := range want {
			keys = append(keys, f)
		}
		slices.Sort(keys)
		for _, f := range keys {
			if len(want) <= size/2 {
				break
			}
			if !s.RemoveSub([]byte(f)) || s.RemoveSub([]byte(f)) {
				t.Fatalf("RemoveSub(%q)", f)
			}
			delete(want, f)
		}
		check(fmt.Sprintf("round %d, shrunk to %d", round, len(want)))
	}
	for f := range want {
		s.RemoveSub([]byte(f))
	}
	if s.subs != nil {
		t.Fatal("the set kept after its last subscription went")
	}
}

// BenchmarkAddSub: one more subscription costs the same with 10 or 10,000 held already.
func BenchmarkAddSub(b *testing.B) {
	for _, held := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("Held=%d", held), func(b *testing.B) {
			s := New(1, "c", testLimits())
			for i := range held {
				s.AddSub(Sub{Filter: fmt.Sprintf("held/%d", i)})
			}
			filters := make([]string, 1024)
			for i := range filters {
				filters[i] = fmt.Sprintf("new/%d", i)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				f := filters[i%len(filters)]
				s.AddSub(Sub{Filter: f})
				s.RemoveSub([]byte(f))
			}
		})
	}
}
