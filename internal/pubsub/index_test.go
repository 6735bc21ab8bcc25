package pubsub

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestFanOut churns the subscribers of one filter through the sizes where its block is
// scanned, then indexed, then scanned again.
func TestFanOut(t *testing.T) {
	for _, n := range []int{10, 40, 5000, 12000} {
		t.Run(fmt.Sprintf("Subs=%d", n), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(n), 0))
			x := NewIndex()
			in := map[SubscriberID]bool{}
			for step := range 20 * n {
				id := SubscriberID(1 + r.IntN(n))
				filter := []byte("broadcast/all")
				if r.IntN(4) == 0 {
					filter = []byte("$share/g/broadcast/all")
					id += SubscriberID(n)
				}
				if r.IntN(2) == 0 || step < n {
					x.Subscribe(filter, Sub{Subscriber: id, QoS: 1})
					in[id] = true
				} else {
					x.Unsubscribe(filter, id)
					delete(in, id)
				}
				if step%(2*n) == 0 {
					mustCheck(t, x)
				}
			}
			mustCheck(t, x)
			check := func() {
				t.Helper()
				var m Matches
				x.Match([]byte("broadcast/all"), &m)
				got := len(m.Subs)
				if len(m.Groups) == 1 {
					seen := map[SubscriberID]bool{}
					for range 2 * n {
						s, _ := x.Pick(m.Groups[0], all)
						seen[s.Subscriber] = true
					}
					got += len(seen)
				}
				if got != len(in) || x.Len() != len(in) {
					t.Errorf("matched %d, Len %d, want %d", got, x.Len(), len(in))
				}
			}
			check()
			// Shrink back to a handful: blocks halve, big ones move back to pages.
			for id := range in {
				if len(in) <= 3 {
					break
				}
				filter := []byte("broadcast/all")
				if id > SubscriberID(n) {
					filter = []byte("$share/g/broadcast/all")
				}
				if !x.Unsubscribe(filter, id) {
					t.Fatalf("Unsubscribe(%s, %d) = false", filter, id)
				}
				delete(in, id)
			}
			mustCheck(t, x)
			check()
		})
	}
}

func TestLongFilter(t *testing.T) {
	level := strings.Repeat("x", 1000)
	long := strings.Repeat(level+"/", 100) + "end" // 100 KB: past MQTT's limit, still handled
	x := NewIndex()
	x.Subscribe([]byte(long), Sub{Subscriber: 1})
	x.Subscribe([]byte(strings.Repeat(level+"/", 99)+"+/end"), Sub{Subscriber: 2})
	x.Subscribe([]byte(level+"/#"), Sub{Subscriber: 3})
	mustCheck(t, x)
	var m Matches
	x.Match([]byte(long), &m)
	if len(m.Subs) != 3 {
		t.Errorf("Match(long) = %v, want 3 subs", m.Subs)
	}
	x.Unsubscribe([]byte(level+"/#"), 3)
	x.Unsubscribe([]byte(strings.Repeat(level+"/", 99)+"+/end"), 2)
	mustCheck(t, x)
	m.Reset()
	x.Match([]byte(long), &m)
	if len(m.Subs) != 1 || !x.Unsubscribe([]byte(long), 1) || x.Len() != 0 {
		t.Errorf("after removals: Match = %v, Len %d", m.Subs, x.Len())
	}
}

// TestUpkeepMoves empties the start of the id space so that upkeep moves the nodes at its
// end, which carry an indexed block, a big block, shared groups and many children, and
// checks that matching sees no difference.
func TestUpkeepMoves(t *testing.T) {
	lowThresholds(t)
	x := NewIndex()
	const early = 3 * pageLen
	for i := range early {
		x.Subscribe(fmt.Appendf(nil, "early/%d", i), Sub{Subscriber: 1})
	}
	for i := range 40 {
		x.Subscribe([]byte("hub/indexed"), Sub{Subscriber: SubscriberID(i + 1), ID: 1})
		x.Subscribe([]byte("$share/g/hub/+"), Sub{Subscriber: SubscriberID(i + 1), ID: 2})
		x.Subscribe(fmt.Appendf(nil, "hub/child/%d", i), Sub{Subscriber: SubscriberID(i + 1), ID: 3})
	}
	for i := range pageLen + 10 {
		x.Subscribe([]byte("hub/big"), Sub{Subscriber: SubscriberID(i + 1), ID: 4})
	}
	count := func(topic string) (subs, members int) {
		var m Matches
		x.Match([]byte(topic), &m)
		for _, g := range m.Groups {
			seen := map[SubscriberID]bool{}
			for range 100 {
				s, _ := x.Pick(g, all)
				seen[s.Subscriber] = true
			}
			members += len(seen)
		}
		return len(m.Subs), members
	}
	type result struct{ subs, members int }
	topics := []string{"hub/indexed", "hub/big", "hub/child/7", "hub/x"}
	before := map[string]result{}
	for _, tp := range topics {
		s, m := count(tp)
		before[tp] = result{s, m}
	}
	pagesBefore := x.stats().pages
	for i := range early {
		x.Unsubscribe(fmt.Appendf(nil, "early/%d", i), 1)
		if i%500 == 0 {
			mustCheck(t, x)
		}
	}
	mustCheck(t, x)
	if st := x.stats(); st.pages >= pagesBefore || st.pages > 1 {
		t.Errorf("%d node pages left of %d", st.pages, pagesBefore)
	}
	for _, tp := range topics {
		if s, m := count(tp); (result{s, m}) != before[tp] {
			t.Errorf("Match(%q) after moves: %d subs, %d members; before %+v", tp, s, m, before[tp])
		}
	}
	// The moved big and indexed blocks still find their subscribers.
	if !x.Unsubscribe([]byte("hub/big"), 77) || !x.Unsubscribe([]byte("hub/indexed"), 7) ||
		!x.Unsubscribe([]byte("$share/g/hub/+"), 7) || !x.Subscribe([]byte("hub/big"), Sub{Subscriber: 78}) ||
		x.Subscribe([]byte("hub/big"), Sub{Subscriber: 99999}) {
		t.Error("moved blocks lost track of their subscribers")
	}
	mustCheck(t, x)
}

func TestWalk(t *testing.T) {
	filters := []string{"a/b", "a/+", "a/#", "#", "devices/1/cmd", "devices/12/cmd", "$share/g/a/b", "$share/h/a/b", "/", "a//b"}
	x := NewIndex()
	var want []string
	for i, f := range filters {
		for id := range SubscriberID(2) {
			x.Subscribe([]byte(f), Sub{Subscriber: id + 1, ID: uint32(i)})
			want = append(want, fmt.Sprintf("%s %d", f, id+1))
		}
	}
	var got []string
	x.Walk(func(filter []byte, s Sub) bool {
		if filters[s.ID] != string(filter) {
			t.Errorf("Walk gave filter %q for a Sub of %q", filter, filters[s.ID])
		}
		got = append(got, fmt.Sprintf("%s %d", filter, s.Subscriber))
		return true
	})
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Walk gave %q, want %q", got, want)
	}
	n := 0
	x.Walk(func([]byte, Sub) bool { n++; return n < 3 })
	if n != 3 {
		t.Errorf("Walk went on after fn returned false: %d calls", n)
	}
}

// TestConcurrent matches and picks while another goroutine subscribes and unsubscribes;
// run it with -race. A subscription never touched stays visible throughout.
func TestConcurrent(t *testing.T) {
	x := NewIndex()
	x.Subscribe([]byte("stable/+"), Sub{Subscriber: 1000})
	x.Subscribe([]byte("$share/g/stable/#"), Sub{Subscriber: 1000})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Go(func() {
			var m Matches
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				m.Reset()
				topic := fmt.Sprintf("stable/%d", r.IntN(100))
				x.Match([]byte(topic), &m)
				if !slices.ContainsFunc(m.Subs, func(s Sub) bool { return s.Subscriber == 1000 }) {
					t.Errorf("Match(%q) lost the stable subscription: %v", topic, m.Subs)
					return
				}
				for _, g := range m.Groups {
					x.Pick(g, all)
					_ = x.GroupName(g)
				}
				_ = x.Len()
			}
		})
	}
	r := rand.New(rand.NewPCG(9, 9))
	var live []string
	for i := range 20000 {
		if len(live) > 500 || (len(live) > 0 && r.IntN(2) == 0) {
			k := r.IntN(len(live))
			x.Unsubscribe([]byte(live[k]), 1)
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		f := fmt.Sprintf("stable/%d", r.IntN(100))
		switch r.IntN(3) {
		case 0:
			f = fmt.Sprintf("$share/g%d/stable/+", i)
		case 1:
			f = fmt.Sprintf("stable/%d/x/%d", r.IntN(100), i)
		}
		if !x.Subscribe([]byte(f), Sub{Subscriber: 1}) {
			live = append(live, f)
		}
	}
	close(stop)
	wg.Wait()
	mustCheck(t, x)
}

// TestWalkEmpty: Walk over an index that is empty, new or emptied, calls nothing.
func TestWalkEmpty(t *testing.T) {
	x := NewIndex()
	x.Walk(func([]byte, Sub) bool { t.Error("called on a new index"); return true })
	x.Subscribe([]byte("a/b"), Sub{Subscriber: 1})
	x.Unsubscribe([]byte("a/b"), 1)
	x.Walk(func([]byte, Sub) bool { t.Error("called on an emptied index"); return true })
}

// TestSubscribed: a filter is subscribed while it has a subscriber of its own, a shared
// group while it has a member; a filter's group or a deeper filter does not count.
func TestSubscribed(t *testing.T) {
	x := NewIndex()
	x.Subscribe([]byte("a/b/c"), Sub{Subscriber: 1})
	x.Subscribe([]byte("$share/g/a/b"), Sub{Subscriber: 2})
	for _, c := range []struct {
		filter string
		want   bool
	}{{"a/b/c", true}, {"a/b", false}, {"a", false}, {"$share/g/a/b", true}, {"$share/h/a/b", false},
		{"$share/g/a/b/c", false}, {"x", false}} {
		if got := x.Subscribed([]byte(c.filter)); got != c.want {
			t.Errorf("Subscribed(%q) = %v; want %v", c.filter, got, c.want)
		}
	}
	x.Unsubscribe([]byte("a/b/c"), 1)
	x.Unsubscribe([]byte("$share/g/a/b"), 2)
	if x.Subscribed([]byte("a/b/c")) || x.Subscribed([]byte("$share/g/a/b")) {
		t.Fatal("subscribed after the last subscriber left")
	}
}
