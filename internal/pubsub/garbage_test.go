package pubsub

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// manyFilters returns n distinct-ish random filters over a large vocabulary: some exact,
// some with '+' or '#', some shared.
func manyFilters(r *rand.Rand, n int) []string {
	fs := make([]string, n)
	for i := range fs {
		l := make([]string, 1+r.IntN(6))
		for j := range l {
			switch k := r.IntN(100); {
			case k < 6:
				l[j] = "+"
			case k < 8:
				l[j] = ""
			default:
				l[j] = fmt.Sprintf("w%d", r.IntN(50+j*2000))
			}
		}
		if r.IntN(20) == 0 {
			l[len(l)-1] = "#"
		}
		fs[i] = strings.Join(l, "/")
		if r.IntN(20) == 0 {
			fs[i] = fmt.Sprintf("$share/g%d/%s", r.IntN(3), fs[i])
		}
	}
	return fs
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestNoGarbage subscribes and unsubscribes 100K random filters: on the way the index never
// holds more garbage than live data (past the minimums), and at the end it holds no more
// than a new index.
func TestNoGarbage(t *testing.T) {
	const n = 100_000
	for _, low := range []bool{false, true} {
		t.Run(fmt.Sprintf("LowThresholds=%v", low), func(t *testing.T) {
			if low {
				lowThresholds(t)
			}
			testNoGarbage(t, n)
		})
	}
}

func testNoGarbage(t *testing.T, n int) {
	r := rand.New(rand.NewPCG(1, 2))
	filters := manyFilters(r, n)
	ids := make([]SubscriberID, n)
	for i := range ids {
		ids[i] = SubscriberID(1 + r.IntN(1000))
	}
	before := heapAlloc()
	x := NewIndex()
	fresh := x.stats()
	subscribed := 0
	for i, f := range filters {
		if !x.Subscribe([]byte(f), Sub{Subscriber: ids[i]}) {
			subscribed++
		}
	}
	mustCheck(t, x)
	full := x.stats()
	t.Logf("full: %+v, %d subscriptions", full, subscribed)
	order := r.Perm(n)
	for k, i := range order {
		x.Unsubscribe([]byte(filters[i]), ids[i])
		if k%(n/8) == n/16 {
			mustCheck(t, x)
			if st := x.stats(); st.freeNodes > max(minFreeNodes, st.nodes/2) ||
				st.deadLabels > max(minDeadBytes*st.pages, (st.labels+1)/2) ||
				st.freeSubs > max(int(minFreeSubs)*st.pages, (st.subs+1)/2) {
				t.Fatalf("after %d removals, more garbage than live: %+v", k+1, st)
			}
		}
	}
	if x.Len() != 0 {
		t.Fatalf("Len = %d after removing everything", x.Len())
	}
	if st := x.stats(); st != fresh {
		t.Errorf("after removing everything: %+v, new index: %+v", st, fresh)
	}
	if after := heapAlloc(); after > before+64<<10 {
		t.Errorf("heap grew by %d bytes", after-before)
	}
	runtime.KeepAlive(x)
}

// lowThresholds makes the index's upkeep run at the smallest sizes, for the length of a
// test, so that randomized tests exercise it.
func lowThresholds(t *testing.T) {
	nodes, dead, subs := minFreeNodes, minDeadBytes, minFreeSubs
	minFreeNodes, minDeadBytes, minFreeSubs = 2, 4, 2
	t.Cleanup(func() { minFreeNodes, minDeadBytes, minFreeSubs = nodes, dead, subs })
}

func TestRetainedNoGarbage(t *testing.T) {
	const n = 100_000
	r := rand.New(rand.NewPCG(3, 4))
	topics := make([]string, n)
	for i, f := range manyFilters(r, n) {
		f = strings.TrimPrefix(f, "$share/")
		topics[i] = strings.NewReplacer("+", "p", "#", "h").Replace(f)
	}
	r2 := NewRetained[int]()
	fresh := r2.stats()
	for i, tp := range topics {
		r2.Set([]byte(tp), i)
	}
	if err := checkTree(&r2.tree); err != nil {
		t.Fatal(err)
	}
	for k, i := range r.Perm(n) {
		r2.Delete([]byte(topics[i]))
		if k%(n/4) == n/8 {
			if err := checkTree(&r2.tree); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := r2.stats(); st != fresh || r2.Len() != 0 {
		t.Errorf("after removing everything: %+v, Len %d; new store: %+v", st, r2.Len(), fresh)
	}
}
