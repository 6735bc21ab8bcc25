package listener

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// item is a wheel entry for tests.
type item struct {
	name string
	tm   timer[item]
	last atomic.Uint32
}

var _ timed[item] = (*item)(nil)

func (it *item) timer() *timer[item]      { return &it.tm }
func (it *item) activity() *atomic.Uint32 { return &it.last }

type testWheel = wheel[item, *item]

func newTestWheel(slots int) *testWheel {
	// Started now, and advanced by hand far faster than its clock: touch and set take
	// the tick of the last advance.
	return newWheel[item](100*time.Millisecond, slots, time.Now())
}

// expiries advances w one tick at a time up to tick to and returns, per item, the tick at
// which it expired.
func expiries(w *testWheel, to uint32) map[string]uint32 {
	got := map[string]uint32{}
	for t := w.now.Load() + 1; int32(to-t) >= 0; t++ {
		w.advance(t, func(it *item) { got[it.name] = t })
	}
	return got
}

func TestWheelTicksFor(t *testing.T) {
	w := newTestWheel(8)
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {100 * time.Millisecond, 1},
		{101 * time.Millisecond, 2}, {time.Second, 10}, {1000 * time.Hour, 36_000_000}, {1 << 62, maxTicks}, {time.Duration(1<<63 - 1), maxTicks},
	} {
		if got := w.ticksFor(tc.d); got != tc.want {
			t.Errorf("ticksFor(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestWheelBounds checks the documented resolution: an entry with timeout d (k ticks)
// added at tick a expires at tick a+k+1: never before d has passed, at most 2 ticks late.
func TestWheelBounds(t *testing.T) {
	for _, slots := range []int{4, 16, 512} { // timeouts shorter and longer than a turn
		w := newTestWheel(slots)
		w.advance(3, func(*item) { t.Fatal("empty wheel expired something") })
		for _, ticks := range []uint32{1, 2, 5, 17, 40} {
			it := &item{name: "x"}
			start := w.now.Load()
			w.set(it, time.Duration(ticks)*w.tick)
			got := expiries(w, start+ticks+5)
			if got["x"] != start+ticks+1 {
				t.Errorf("slots %d, timeout %d ticks from %d: expired at %d, want %d",
					slots, ticks, start, got["x"], start+ticks+1)
			}
		}
	}
}

func TestWheelTouchPostpones(t *testing.T) {
	w := newTestWheel(8)
	a, b := &item{name: "a"}, &item{name: "b"}
	w.set(a, 3*w.tick) // due at 4
	w.set(b, 3*w.tick)
	if got := expiries(w, 3); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	w.touch(a) // at 3: due at 7
	got := expiries(w, 10)
	if got["b"] != 4 || got["a"] != 7 {
		t.Fatalf("expiries %v, want b at 4 and a at 7", got)
	}
}

func TestWheelResetRemove(t *testing.T) {
	w := newTestWheel(8)
	a, b, c := &item{name: "a"}, &item{name: "b"}, &item{name: "c"}
	w.set(a, 2*w.tick)
	w.set(b, 2*w.tick)
	w.set(c, 2*w.tick)
	w.reset(a, 0)        // no timeout: kept, never expires
	w.reset(b, 6*w.tick) // due at 7
	w.remove(c)          // gone
	w.remove(c)          // twice is fine
	w.reset(c, w.tick)   // not in the wheel: stays out
	if got := expiries(w, 20); len(got) != 1 || got["b"] != 7 {
		t.Fatalf("expiries %v, want only b at 7", got)
	}
	var names []string
	w.each(func(it *item) { names = append(names, it.name) })
	if !slices.Equal(names, []string{"a"}) {
		t.Fatalf("each saw %v, want [a]", names)
	}
	w.reset(a, w.tick) // back on a timeout
	if got := expiries(w, 25); got["a"] != 22 {
		t.Fatalf("expiries %v, want a at 22", got)
	}
}

// TestWheelJump checks that a late advance, skipping many ticks, expires everything due.
func TestWheelJump(t *testing.T) {
	w := newTestWheel(8)
	var its []*item
	for i := range 50 {
		it := &item{name: string(rune('A' + i))}
		w.set(it, time.Duration(1+i%20)*w.tick)
		its = append(its, it)
	}
	late := &item{name: "late"}
	w.set(late, 1000*w.tick)
	n := 0
	w.advance(500, func(it *item) {
		if it == late {
			t.Error("the long timeout expired early")
		}
		n++
	})
	if n != len(its) {
		t.Fatalf("a jump of 500 ticks expired %d entries, want %d", n, len(its))
	}
	if got := expiries(w, 1100); got["late"] != 1001 {
		t.Fatalf("late expired at %d, want 1001", got["late"])
	}
}

// TestWheelExpireCallsBack checks that expire runs without the lock: it may use the wheel.
func TestWheelExpireCallsBack(t *testing.T) {
	w := newTestWheel(8)
	a := &item{name: "a"}
	w.set(a, w.tick)
	w.advance(5, func(it *item) {
		w.remove(it)
		w.set(it, 0)
	})
	var n int
	w.each(func(*item) { n++ })
	if n != 1 {
		t.Fatalf("wheel holds %d entries after expire re-added one, want 1", n)
	}
}

// TestWheelRun drives the ticking goroutine on synctest's fake clock.
func TestWheelRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWheel[item](250*time.Millisecond, 64, time.Now())
		expired := make(chan *item, 4)
		done := make(chan struct{})
		go w.run(done, func(it *item) { expired <- it })

		idle := &item{name: "idle"}
		busy := &item{name: "busy"}
		w.set(idle, time.Second)
		w.set(busy, time.Second)
		for range 12 { // busy reads every 300ms for 3.6s
			time.Sleep(300 * time.Millisecond)
			w.touch(busy)
		}
		synctest.Wait()
		if got := <-expired; got != idle {
			t.Fatalf("expired %s, want idle", got.name)
		}
		select {
		case it := <-expired:
			t.Fatalf("%s expired while active", it.name)
		default:
		}
		lastTouch := time.Now()
		got := <-expired // blocks until the fake clock reaches the deadline
		elapsed := time.Since(lastTouch)
		if got != busy || elapsed < time.Second || elapsed > time.Second+2*w.tick {
			t.Fatalf("%s expired %v after its last activity, want within [1s, 1.5s]", got.name, elapsed)
		}
		close(done)
	})
}

// TestWheelRenew checks renew, the paused connection's keep alive (pause.go): an entry
// found due goes back for a full timeout while it is held, stays out if nothing touched
// it, goes back until its new deadline if it was touched after it was found due, and
// stays out once closed.
func TestWheelRenew(t *testing.T) {
	w := newTestWheel(16)
	it := &item{name: "a"}
	w.set(it, 200*time.Millisecond) // 2 ticks: due at tick 3
	var due []*item
	collect := func(to uint32) {
		for tk := w.now.Load() + 1; int32(to-tk) >= 0; tk++ {
			w.advance(tk, func(it *item) { due = append(due, it) })
		}
	}
	open, held := true, true
	isOpen := func(*item) bool { return open }
	isHeld := func(*item) bool { return held }

	collect(3)
	if len(due) != 1 {
		t.Fatalf("%d entries due at tick 3, want 1", len(due))
	}
	due = due[:0]
	if !w.renew(it, isOpen, isHeld) {
		t.Fatal("a held entry was not renewed")
	}
	collect(5)
	if len(due) != 0 {
		t.Fatal("a renewed entry expired before a full timeout")
	}
	collect(6)
	if len(due) != 1 {
		t.Fatal("a renewed entry did not come due again")
	}
	due = due[:0]

	held = false // resumed, and nothing since: due
	if w.renew(it, isOpen, isHeld) {
		t.Fatal("an entry neither held nor touched was renewed")
	}
	w.set(it, 200*time.Millisecond)
	collect(9)
	due = due[:0]
	it.last.Store(w.now.Load()) // touched as it was resumed, after advance found it due
	if !w.renew(it, isOpen, isHeld) {
		t.Fatal("an entry touched after it was found due was not put back")
	}
	collect(11)
	if len(due) != 0 {
		t.Fatal("a touched entry expired before its new deadline")
	}
	collect(12)
	if len(due) != 1 {
		t.Fatal("a touched entry did not come due at its new deadline")
	}
	due = due[:0]

	held, open = true, false
	if w.renew(it, isOpen, isHeld) {
		t.Fatal("a closed entry was renewed")
	}
}
