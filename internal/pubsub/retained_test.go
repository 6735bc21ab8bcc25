package pubsub

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestRetainedMatch(t *testing.T) {
	topics := []string{
		"sport", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking",
		"sport/", "/finance", "/", "a//b", "$SYS/broker/load", "$SYS", "a/$b",
		"devices/1/cmd", "devices/12/cmd", "devices/1",
	}
	tests := []struct {
		filter string
		want   []string
	}{
		{"sport/tennis/player1", []string{"sport/tennis/player1"}},
		{"sport/#", []string{"sport", "sport/", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"sport/tennis/#", []string{"sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"sport/+", []string{"sport/", "sport/tennis"}},
		{"sport/+/player1", []string{"sport/tennis/player1"}},
		{"+", []string{"sport"}},
		{"+/+", []string{"sport/", "sport/tennis", "/finance", "/", "a/$b", "devices/1"}},
		{"/+", []string{"/finance", "/"}},
		{"+/#", []string{"sport", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking",
			"sport/", "/finance", "/", "a//b", "a/$b", "devices/1/cmd", "devices/12/cmd", "devices/1"}},
		{"#", []string{"sport", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking",
			"sport/", "/finance", "/", "a//b", "a/$b", "devices/1/cmd", "devices/12/cmd", "devices/1"}},
		{"a/+/b", []string{"a//b"}},
		{"$SYS/#", []string{"$SYS", "$SYS/broker/load"}},
		{"+/broker/load", nil},
		{"$SYS/+/load", []string{"$SYS/broker/load"}},
		{"devices/+/cmd", []string{"devices/1/cmd", "devices/12/cmd"}},
		{"devices/1/#", []string{"devices/1", "devices/1/cmd"}},
		{"devices/1", []string{"devices/1"}},
		{"devices", nil},
		{"devices/1/cmd/+", nil},
		{"devices/+/+/+", nil},
		{"Sport/#", nil},
	}
	r := NewRetained[string]()
	for _, tp := range topics {
		r.Set([]byte(tp), "v:"+tp)
	}
	if err := checkTree(&r.tree); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			var got []string
			r.Match([]byte(tt.filter), func(topic string, v string) bool {
				if v != "v:"+topic {
					t.Errorf("topic %q with value %q", topic, v)
				}
				got = append(got, topic)
				return true
			})
			slices.Sort(got)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("Match(%q) = %q, want %q", tt.filter, got, want)
			}
			for _, tp := range topics {
				if refMatch(tt.filter, tp) != slices.Contains(want, tp) {
					t.Errorf("reference matcher disagrees with the table on %q", tp)
				}
			}
		})
	}
}

func TestRetainedSetGetDelete(t *testing.T) {
	r := NewRetained[int]()
	topic := []byte("a/b/c")
	r.Set(topic, 1)
	topic[0] = 'x' // Set copied it
	r.Set([]byte("a/b/c"), 2)
	r.Set([]byte("a/b"), 3)
	if v, ok := r.Get([]byte("a/b/c")); !ok || v != 2 {
		t.Errorf("Get(a/b/c) = %d, %v; want 2 (replaced)", v, ok)
	}
	if _, ok := r.Get([]byte("x/b/c")); ok {
		t.Error("Get found the caller's modified topic")
	}
	if _, ok := r.Get([]byte("a")); ok {
		t.Error("Get found an interior level")
	}
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2", r.Len())
	}
	if r.Delete([]byte("a")) || r.Delete([]byte("a/b/c/d")) {
		t.Error("Delete of a missing topic reported true")
	}
	if !r.Delete([]byte("a/b")) || r.Len() != 1 {
		t.Errorf("Delete(a/b) failed, Len %d", r.Len())
	}
	if v, ok := r.Get([]byte("a/b/c")); !ok || v != 2 {
		t.Errorf("Get(a/b/c) after deleting a/b = %d, %v", v, ok)
	}
	if err := checkTree(&r.tree); err != nil {
		t.Fatal(err)
	}
	// fn returning false stops the match.
	r.Set([]byte("a/x"), 4)
	n := 0
	r.Match([]byte("#"), func(string, int) bool { n++; return false })
	if n != 1 {
		t.Errorf("fn called %d times after returning false", n)
	}
}

func TestRetainedRandom(t *testing.T) {
	for _, low := range []bool{false, true} {
		t.Run(fmt.Sprintf("LowThresholds=%v", low), func(t *testing.T) {
			if low {
				lowThresholds(t)
			}
			testRetainedRandom(t)
		})
	}
}

func testRetainedRandom(t *testing.T) {
	for seed := range uint64(3) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		r := NewRetained[uint32]()
		ref := map[string]uint32{}
		for op := range 5000 {
			tp := randomTopic(rnd)
			if rnd.IntN(3) < 2 {
				v := rnd.Uint32()
				r.Set([]byte(tp), v)
				ref[tp] = v
			} else {
				_, had := ref[tp]
				if got := r.Delete([]byte(tp)); got != had {
					t.Fatalf("seed %d op %d: Delete(%q) = %v, want %v", seed, op, tp, got, had)
				}
				delete(ref, tp)
			}
			if r.Len() != len(ref) {
				t.Fatalf("seed %d op %d: Len %d, want %d", seed, op, r.Len(), len(ref))
			}
			if op%50 != 0 {
				continue
			}
			if err := checkTree(&r.tree); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			for range 10 {
				f := strings.TrimPrefix(randomFilter(rnd), "$share/")
				if strings.HasPrefix(f, "g0/") || strings.HasPrefix(f, "g1/") {
					f = f[3:]
				}
				got := map[string]uint32{}
				r.Match([]byte(f), func(topic string, v uint32) bool {
					if _, dup := got[topic]; dup {
						t.Fatalf("seed %d op %d: Match(%q) gave %q twice", seed, op, f, topic)
					}
					got[topic] = v
					return true
				})
				want := map[string]uint32{}
				for tp, v := range ref {
					if refMatch(f, tp) {
						want[tp] = v
					}
				}
				if len(got) != len(want) {
					t.Fatalf("seed %d op %d: Match(%q) = %v, want %v", seed, op, f, got, want)
				}
				for tp, v := range want {
					if got[tp] != v {
						t.Fatalf("seed %d op %d: Match(%q) = %v, want %v", seed, op, f, got, want)
					}
				}
			}
		}
	}
}
