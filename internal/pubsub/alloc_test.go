package pubsub

import (
	"fmt"
	"runtime"
	"testing"
)

// allocs is testing.AllocsPerRun without its rounding down: it returns every allocation of
// runs calls of fn (after one warm-up call), so that an allocation every few calls shows.
// The process-wide counter also sees the runtime's own rare allocations (the race
// detector's, a timer's), so the fewest of three measurements is taken: an allocation of
// fn's shows in all three.
func allocs(runs int, fn func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fn()
	least := uint64(1<<64 - 1)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			fn()
		}
		runtime.ReadMemStats(&after)
		least = min(least, after.Mallocs-before.Mallocs)
	}
	return least
}

// TestZeroAllocs proves, by counting, the allocation promises: Match into a reused Matches, a Subscribe
// that adds a subscriber to an existing filter, and Unsubscribe allocate nothing.
func TestZeroAllocs(t *testing.T) {
	x := NewIndex()
	for i := range 1000 {
		x.Subscribe(fmt.Appendf(nil, "devices/%d/cmd", i), Sub{Subscriber: SubscriberID(i + 1)})
		x.Subscribe(fmt.Appendf(nil, "devices/%d/status", i), Sub{Subscriber: SubscriberID(i + 1)})
	}
	for _, f := range []string{"devices/+/cmd", "devices/#", "#", "$share/g/devices/+/cmd", "$share/h/devices/7/cmd"} {
		for id := range SubscriberID(3) {
			x.Subscribe([]byte(f), Sub{Subscriber: id + 1})
		}
	}
	// Filters removed one at a time by the Unsubscribe case, with their nodes.
	const removable = 200
	for i := range 3*removable + 3 { // allocs measures three times
		x.Subscribe(fmt.Appendf(nil, "gone/%d/x", i), Sub{Subscriber: 1})
		x.Subscribe([]byte("devices/7/cmd"), Sub{Subscriber: SubscriberID(5000 + i)})
	}
	gone := make([][]byte, 3*removable+1) // and one for the warm-up run
	for i := range gone {
		gone[i] = fmt.Appendf(nil, "gone/%d/x", i)
	}
	topic := []byte("devices/7/cmd")
	var m Matches
	tests := []struct {
		name string
		fn   func()
	}{
		{"Match", func() { m.Reset(); x.Match(topic, &m) }},
		{"Match/Shared", func() { m.Reset(); x.Match(topic, &m); x.Pick(m.Groups[0], all) }},
		{"Subscribe+Unsubscribe/ExistingFilter", func() {
			x.Subscribe(topic, Sub{Subscriber: 9999})
			x.Unsubscribe(topic, 9999)
		}},
		{"Subscribe/Replace", func() { x.Subscribe(topic, Sub{Subscriber: 5, QoS: 1}) }},
		{"Unsubscribe/Missing", func() { x.Unsubscribe([]byte("devices/7/nothing"), 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := testing.AllocsPerRun(100, tt.fn); a != 0 {
				t.Errorf("AllocsPerRun = %v, want 0", a)
			}
			if a := allocs(100, tt.fn); a != 0 {
				t.Errorf("%d allocs in 100 runs, want 0", a)
			}
		})
	}
	// Unsubscribe alone, of a subscriber of a filter that keeps others and of a filter
	// whose nodes go with it: each run removes another one.
	t.Run("Unsubscribe/ExistingFilter", func(t *testing.T) {
		i := 0
		if a := allocs(removable, func() { x.Unsubscribe(topic, SubscriberID(5000+i)); i++ }); a != 0 {
			t.Errorf("%d allocs in %d runs, want 0", a, removable)
		}
	})
	t.Run("Unsubscribe/LastOfFilter", func(t *testing.T) {
		i := 0
		if a := allocs(removable, func() { x.Unsubscribe(gone[i], 1); i++ }); a != 0 {
			t.Errorf("%d allocs in %d runs, want 0", a, removable)
		}
	})
	mustCheck(t, x)
}
