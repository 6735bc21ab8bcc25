package pubsub

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// matchedFilters subscribes subscriber i+1 to filters[i], with subscription identifier i+1,
// matches topic and returns the filters that matched, sorted.
func matchedFilters(t *testing.T, filters []string, topic string) []string {
	t.Helper()
	x := NewIndex()
	for i, f := range filters {
		x.Subscribe([]byte(f), Sub{Subscriber: SubscriberID(i + 1), ID: uint32(i + 1)})
	}
	mustCheck(t, x)
	var m Matches
	x.Match([]byte(topic), &m)
	got := []string{}
	for _, s := range m.Subs {
		got = append(got, filters[s.ID-1])
	}
	slices.Sort(got)
	return got
}

func deep(n int, last string) string {
	l := make([]string, n)
	for i := range l {
		l[i] = fmt.Sprintf("l%d", i)
	}
	if last != "" {
		l[n-1] = last
	}
	return strings.Join(l, "/")
}

func TestMatch(t *testing.T) {
	tests := []struct {
		topic   string
		match   []string
		nomatch []string
	}{
		{"sport/tennis/player1",
			[]string{"sport/tennis/player1", "sport/tennis/player1/#", "sport/#", "#", "sport/tennis/+", "+/+/+", "+/tennis/#", "+/#"},
			[]string{"sport/+", "Sport/tennis/player1", "sport/tennis", "sport/tennis/player2", "sport/tennis/player1/+", "+", "+/+", "sport/tennis/player", "sport/tennis/player11"}},
		// '#' matches the parent level [MQTT-4.7.1-2]; '+' needs a level.
		{"sport",
			[]string{"sport", "sport/#", "+", "#", "+/#"},
			[]string{"sport/+", "/sport", "sport/", "+/+", "spor", "sports"}},
		// Empty levels are levels: '+' matches an empty one.
		{"sport/",
			[]string{"sport/", "sport/+", "sport/#", "+/+", "+/#", "#", "+/"},
			[]string{"sport", "+", "sport/x", "sport//"}},
		{"/finance",
			[]string{"/finance", "+/+", "/+", "#", "/#", "+/finance", "+/#"},
			[]string{"+", "finance", "/finance/+"}},
		{"a//b",
			[]string{"a//b", "a/+/b", "a/#", "+/+/+", "a//#", "a/+/+", "+//b"},
			[]string{"a/b", "a/+", "a//", "a//b/+"}},
		{"/",
			[]string{"/", "+/+", "#", "/#", "+/#", "+/", "/+"},
			[]string{"+", "+/+/+", "//"}},
		// [MQTT-4.7.2-1] '$' topics are not matched by a leading wildcard.
		{"$SYS/broker/load",
			[]string{"$SYS/broker/load", "$SYS/#", "$SYS/broker/+", "$SYS/+/load", "$SYS/+/+"},
			[]string{"#", "+/broker/load", "+/#", "+/+/+", "$SYS", "$sys/#"}},
		{"$SYS",
			[]string{"$SYS", "$SYS/#"},
			[]string{"#", "+", "$SYS/+"}},
		{"a/$b",
			[]string{"a/+", "#", "+/+", "a/#", "a/$b", "+/$b"},
			[]string{"a/$c"}},
		// Labels shared by compressed nodes must still split at level boundaries.
		{"devices/1/cmd",
			[]string{"devices/1/cmd", "devices/+/cmd", "devices/1/#"},
			[]string{"devices/1", "devices/12/cmd", "devices/1/cmd/x", "devices/1/cm", "devices/1/cmdx", "devices/11/cmd"}},
		{"devices/1",
			[]string{"devices/1", "devices/1/#", "devices/+"},
			[]string{"devices/1/cmd", "devices/12", "devices"}},
		{"ünïcode/日本",
			[]string{"ünïcode/+", "ünïcode/日本"},
			[]string{"unicode/+", "ünïcode/日"}},
		// Deeper than any fixed array of levels.
		{deep(40, ""),
			[]string{deep(40, ""), deep(40, "+"), "l0/#", strings.Repeat("+/", 39) + "+", strings.Repeat("+/", 39) + "#"},
			[]string{deep(40, "x"), deep(39, ""), deep(41, ""), strings.Repeat("+/", 40) + "+"}},
	}
	for _, tt := range tests {
		t.Run(tt.topic, func(t *testing.T) {
			filters := append(append([]string{}, tt.match...), tt.nomatch...)
			want := slices.Clone(tt.match)
			slices.Sort(want)
			if got := matchedFilters(t, filters, tt.topic); !slices.Equal(got, want) {
				t.Errorf("Match(%q) = %q, want %q", tt.topic, got, want)
			}
			for _, f := range filters {
				if refMatch(f, tt.topic) != slices.Contains(tt.match, f) {
					t.Errorf("reference matcher disagrees with the table on %q", f)
				}
			}
		})
	}
}

// A subscriber with several matching filters appears once per filter.
func TestMatchOverlapping(t *testing.T) {
	x := NewIndex()
	for i, f := range []string{"a/b", "a/+", "a/#", "#", "x/y"} {
		x.Subscribe([]byte(f), Sub{Subscriber: 7, ID: uint32(i + 1), QoS: uint8(i % 3)})
	}
	x.Subscribe([]byte("a/b"), Sub{Subscriber: 8, ID: 9})
	var m Matches
	x.Match([]byte("a/b"), &m)
	ids := []uint32{}
	for _, s := range m.Subs {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	if want := []uint32{1, 2, 3, 4, 9}; !slices.Equal(ids, want) {
		t.Errorf("subscription ids %v, want %v", ids, want)
	}
	// Match appends; Reset empties.
	x.Match([]byte("x/y"), &m)
	if len(m.Subs) != 7 {
		t.Errorf("after a second Match: %d subs, want 7", len(m.Subs))
	}
	m.Reset()
	if len(m.Subs) != 0 || len(m.Groups) != 0 {
		t.Errorf("Reset left %d subs %d groups", len(m.Subs), len(m.Groups))
	}
}

func TestSubscribeReplace(t *testing.T) {
	tests := []struct {
		filter string
		topic  string
	}{
		{"a/b", "a/b"},
		{"a/+", "a/b"},
		{"#", "a/b"},
		{"$share/g/a/b", "a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			x := NewIndex()
			if x.Subscribe([]byte(tt.filter), Sub{Subscriber: 1, QoS: 0}) {
				t.Fatal("first Subscribe reported a replace")
			}
			x.Subscribe([]byte(tt.filter), Sub{Subscriber: 2, QoS: 0})
			if !x.Subscribe([]byte(tt.filter), Sub{Subscriber: 1, QoS: 2, ID: 5, Flags: NoLocal}) {
				t.Fatal("second Subscribe did not report a replace")
			}
			if x.Len() != 2 {
				t.Fatalf("Len = %d, want 2", x.Len())
			}
			mustCheck(t, x)
			var m Matches
			x.Match([]byte(tt.topic), &m)
			var got []Sub
			if len(m.Groups) == 1 {
				for range 2 {
					s, _ := x.Pick(m.Groups[0], func(Sub) bool { return true })
					got = append(got, s)
				}
			} else {
				got = m.Subs
			}
			if !slices.Contains(got, Sub{Subscriber: 1, QoS: 2, ID: 5, Flags: NoLocal}) || len(got) != 2 {
				t.Errorf("got %+v, want subscriber 1 with the new options once", got)
			}
		})
	}
}

func TestUnsubscribe(t *testing.T) {
	subscribed := []string{"devices/1/cmd", "a/+/c", "$share/g/a/b", "x/#"}
	tests := []struct {
		filter string
		id     SubscriberID
		want   bool
	}{
		{"devices/1/cmd", 1, true},
		{"devices/1/cmd", 2, false},   // another subscriber
		{"devices/1", 1, false},       // a prefix of a label
		{"devices/1/cmd/x", 1, false}, // longer than any filter
		{"devices/2/cmd", 1, false},
		{"a/+/c", 1, true},
		{"a/b/c", 1, false}, // a topic the filter matches is not the filter
		{"a/+", 1, false},
		{"$share/g/a/b", 1, true},
		{"$share/h/a/b", 1, false}, // another group
		{"a/b", 1, false},          // the filter without its group
		{"x/#", 1, true},
		{"x/+", 1, false},
		{"#", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			x := NewIndex()
			for _, f := range subscribed {
				x.Subscribe([]byte(f), Sub{Subscriber: 1})
			}
			if got := x.Unsubscribe([]byte(tt.filter), tt.id); got != tt.want {
				t.Errorf("Unsubscribe(%q, %d) = %v, want %v", tt.filter, tt.id, got, tt.want)
			}
			want := len(subscribed)
			if tt.want {
				want--
			}
			if x.Len() != want {
				t.Errorf("Len = %d, want %d", x.Len(), want)
			}
			mustCheck(t, x)
			if tt.want && x.Unsubscribe([]byte(tt.filter), tt.id) {
				t.Errorf("second Unsubscribe(%q) = true", tt.filter)
			}
		})
	}
}
