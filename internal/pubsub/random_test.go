package pubsub

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// A small alphabet makes filters share prefixes, so that labels split and merge often.
var randomLevels = []string{"a", "b", "ab", "", "$s", "devices", "1", "12"}

func randomTopic(r *rand.Rand) string {
	l := make([]string, 1+r.IntN(5))
	for i := range l {
		l[i] = randomLevels[r.IntN(len(randomLevels))]
	}
	return strings.Join(l, "/")
}

func randomFilter(r *rand.Rand) string {
	l := strings.Split(randomTopic(r), "/")
	for i := range l {
		if r.IntN(6) == 0 {
			l[i] = "+"
		}
	}
	if r.IntN(8) == 0 {
		l[len(l)-1] = "#"
	}
	f := strings.Join(l, "/")
	if r.IntN(10) == 0 {
		f = "$share/g" + string(rune('0'+r.IntN(2))) + "/" + f
	}
	return f
}

type refKey struct {
	filter string
	id     SubscriberID
}

func cmpSub(a, b Sub) int {
	return cmp.Or(cmp.Compare(a.Subscriber, b.Subscriber), cmp.Compare(a.ID, b.ID),
		cmp.Compare(a.QoS, b.QoS), cmp.Compare(a.Flags, b.Flags))
}

// TestMatchRandom runs random Subscribe and Unsubscribe calls against the Index and a map,
// checking the index's invariants and comparing Match with the reference matcher.
func TestMatchRandom(t *testing.T) {
	for _, low := range []bool{false, true} {
		t.Run(fmt.Sprintf("LowThresholds=%v", low), func(t *testing.T) {
			if low {
				lowThresholds(t)
			}
			testMatchRandom(t)
		})
	}
}

func testMatchRandom(t *testing.T) {
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 1))
		x := NewIndex()
		ref := map[refKey]Sub{}
		var m Matches
		for op := range 6000 {
			f := randomFilter(r)
			id := SubscriberID(1 + r.IntN(6))
			k := refKey{f, id}
			if r.IntN(5) < 3 {
				s := Sub{Subscriber: id, ID: r.Uint32(), QoS: uint8(r.IntN(3)), Flags: uint8(r.IntN(4))}
				_, had := ref[k]
				if got := x.Subscribe([]byte(f), s); got != had {
					t.Fatalf("seed %d op %d: Subscribe(%q, %d) existed = %v, want %v", seed, op, f, id, got, had)
				}
				ref[k] = s
			} else {
				if len(ref) > 0 && r.IntN(2) == 0 { // remove an existing one
					for kk := range ref {
						k = kk
						break
					}
				}
				_, had := ref[k]
				if got := x.Unsubscribe([]byte(k.filter), k.id); got != had {
					t.Fatalf("seed %d op %d: Unsubscribe(%q, %d) = %v, want %v", seed, op, k.filter, k.id, got, had)
				}
				delete(ref, k)
			}
			if x.Len() != len(ref) {
				t.Fatalf("seed %d op %d: Len = %d, want %d", seed, op, x.Len(), len(ref))
			}
			if op%50 != 0 {
				continue
			}
			if err := x.check(); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			for range 10 {
				topic := randomTopic(r)
				m.Reset()
				x.Match([]byte(topic), &m)
				var want []Sub
				groups := map[string]bool{}
				for k, s := range ref {
					f, shared := strings.CutPrefix(k.filter, "$share/")
					if shared {
						_, f, _ = strings.Cut(f, "/")
					}
					if !refMatch(f, topic) {
						continue
					}
					if shared {
						groups[k.filter] = true
					} else {
						want = append(want, s)
					}
				}
				slices.SortFunc(want, cmpSub)
				got := slices.SortedFunc(slices.Values(m.Subs), cmpSub)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d op %d: Match(%q) =\n%+v\nwant\n%+v", seed, op, topic, got, want)
				}
				gotGroups := map[string]bool{}
				for _, g := range m.Groups {
					gotGroups[x.GroupName(g)] = true
				}
				if len(gotGroups) != len(m.Groups) || len(gotGroups) != len(groups) {
					t.Fatalf("seed %d op %d: Match(%q) groups %v, want %v", seed, op, topic, gotGroups, groups)
				}
				for g := range groups {
					if !gotGroups[g] {
						t.Fatalf("seed %d op %d: Match(%q) groups %v, want %v", seed, op, topic, gotGroups, groups)
					}
				}
			}
		}
		// Removing everything leaves an empty index.
		for k := range ref {
			if !x.Unsubscribe([]byte(k.filter), k.id) {
				t.Fatalf("seed %d: final Unsubscribe(%q, %d) = false", seed, k.filter, k.id)
			}
		}
		if st := x.stats(); st.nodes != 1 || x.Len() != 0 {
			t.Fatalf("seed %d: after removing all: %+v", seed, st)
		}
	}
}
