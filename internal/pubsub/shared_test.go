package pubsub

import (
	"fmt"
	"testing"
)

func all(Sub) bool { return true }

func TestPickRoundRobin(t *testing.T) {
	for _, members := range []int{1, 2, 3, 10, 100} {
		t.Run(fmt.Sprintf("Members=%d", members), func(t *testing.T) {
			x := NewIndex()
			for i := range members {
				x.Subscribe([]byte("$share/g/a/+"), Sub{Subscriber: SubscriberID(i + 1)})
			}
			var m Matches
			x.Match([]byte("a/b"), &m)
			if len(m.Groups) != 1 || len(m.Subs) != 0 {
				t.Fatalf("Match: %d groups %d subs, want 1 group", len(m.Groups), len(m.Subs))
			}
			got := map[SubscriberID]int{}
			const rounds = 7
			for i := range rounds * members {
				s, ok := x.Pick(m.Groups[0], all)
				if !ok {
					t.Fatal("Pick found no member")
				}
				got[s.Subscriber]++
				// Consecutive picks never repeat a member while others accept.
				if members > 1 && i > 0 && got[s.Subscriber] > i/members+1 {
					t.Fatalf("pick %d: subscriber %d picked %d times", i, s.Subscriber, got[s.Subscriber])
				}
			}
			for id := 1; id <= members; id++ {
				if got[SubscriberID(id)] != rounds {
					t.Errorf("subscriber %d picked %d times, want %d", id, got[SubscriberID(id)], rounds)
				}
			}
		})
	}
}

func TestPickSkips(t *testing.T) {
	tests := []struct {
		name    string
		offline map[SubscriberID]bool
		want    []SubscriberID // the sequence of picks
	}{
		{"none-offline", nil, []SubscriberID{1, 2, 3, 4, 1, 2}},
		// The member after a skipped one is not picked twice running.
		{"2-offline", map[SubscriberID]bool{2: true}, []SubscriberID{1, 3, 4, 1, 3, 4}},
		{"2,3-offline", map[SubscriberID]bool{2: true, 3: true}, []SubscriberID{1, 4, 1, 4}},
		{"all-but-3-offline", map[SubscriberID]bool{1: true, 2: true, 4: true}, []SubscriberID{3, 3, 3}},
		{"all-offline", map[SubscriberID]bool{1: true, 2: true, 3: true, 4: true}, []SubscriberID{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewIndex()
			for i := range 4 {
				x.Subscribe([]byte("$share/g/t"), Sub{Subscriber: SubscriberID(i + 1)})
			}
			g, ok := x.GroupOf([]byte("$share/g/t"))
			if !ok {
				t.Fatal("GroupOf found no group")
			}
			for i, want := range tt.want {
				s, ok := x.Pick(g, func(s Sub) bool { return !tt.offline[s.Subscriber] })
				if ok != (want != 0) || s.Subscriber != want {
					t.Fatalf("pick %d: %d, %v; want %d", i, s.Subscriber, ok, want)
				}
			}
		})
	}
}

func TestGroupLifetime(t *testing.T) {
	x := NewIndex()
	x.Subscribe([]byte("$share/g/a/b"), Sub{Subscriber: 1})
	x.Subscribe([]byte("$share/g/a/b"), Sub{Subscriber: 2})
	// The same subscriber in several groups, and plainly, on one filter and others.
	x.Subscribe([]byte("$share/h/a/b"), Sub{Subscriber: 1, QoS: 1})
	x.Subscribe([]byte("$share/h/a/+"), Sub{Subscriber: 1, QoS: 2})
	x.Subscribe([]byte("a/b"), Sub{Subscriber: 1})
	if x.Len() != 5 {
		t.Fatalf("Len = %d, want 5", x.Len())
	}
	mustCheck(t, x)
	var m Matches
	x.Match([]byte("a/b"), &m)
	names := map[string]Group{}
	for _, g := range m.Groups {
		names[x.GroupName(g)] = g
	}
	if len(m.Subs) != 1 || len(names) != 3 || len(m.Groups) != 3 {
		t.Fatalf("Match: subs %v, groups %v", m.Subs, names)
	}
	for _, name := range []string{"$share/g/a/b", "$share/h/a/b", "$share/h/a/+"} {
		if _, ok := names[name]; !ok {
			t.Errorf("group %q not matched", name)
		}
	}
	if s, _ := x.Pick(names["$share/h/a/+"], all); s.QoS != 2 {
		t.Errorf("group h/a/+ picked %+v, want QoS 2", s)
	}
	// The group disappears with its last member, and its handle goes stale.
	g := names["$share/g/a/b"]
	x.Unsubscribe([]byte("$share/g/a/b"), 1)
	if s, ok := x.Pick(g, all); !ok || s.Subscriber != 2 {
		t.Errorf("after one left: Pick = %+v, %v", s, ok)
	}
	x.Unsubscribe([]byte("$share/g/a/b"), 2)
	mustCheck(t, x)
	if _, ok := x.Pick(g, all); ok {
		t.Error("Pick on an emptied group succeeded")
	}
	if name := x.GroupName(g); name != "" {
		t.Errorf("GroupName of an emptied group = %q", name)
	}
	if _, ok := x.GroupOf([]byte("$share/g/a/b")); ok {
		t.Error("GroupOf found an emptied group")
	}
	// A new group reusing the slot gets a new generation.
	x.Subscribe([]byte("$share/k/z"), Sub{Subscriber: 3})
	if _, ok := x.Pick(g, all); ok {
		t.Error("stale handle reached a new group")
	}
	m.Reset()
	x.Match([]byte("a/b"), &m)
	if len(m.Groups) != 2 || len(m.Subs) != 1 {
		t.Errorf("after group g left: %d groups %d subs, want 2 and 1", len(m.Groups), len(m.Subs))
	}
	for _, f := range []string{"$share/h/a/b", "$share/h/a/+", "a/b", "$share/k/z"} {
		if !x.Unsubscribe([]byte(f), map[bool]SubscriberID{true: 3, false: 1}[f == "$share/k/z"]) {
			t.Errorf("Unsubscribe(%q) = false", f)
		}
	}
	if st := x.stats(); st.nodes != 1 || st.groups != 0 || x.Len() != 0 {
		t.Errorf("not empty at the end: %+v", st)
	}
}
