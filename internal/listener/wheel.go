package listener

import (
	"sync"
	"sync/atomic"
	"time"
)

// A wheel is a hashed timing wheel: the one clock behind every idle timeout, connect timeout
// and Shutdown linger of a Server, so that no connection owns a time.Timer or a goroutine.
//
// Time is counted in ticks of a fixed duration (Options.Tick). An entry's deadline is
// last+ticks+1, where last is the tick of its last activity; the entry sits in the slot
// deadline mod len(slots). Refreshing an entry on activity is one atomic store of the
// current tick (touch): the entry is not moved. The current tick is read from the
// monotonic clock, not taken from the last advance: when the ticking goroutine runs late
// (a stalled process catching up), activity it has not seen yet must not count as old,
// or active connections would expire as it catches up. When its slot comes round the wheel checks
// the deadline again and either expires the entry or moves it to the slot of its new
// deadline. An entry is therefore visited about once per timeout period, plus once per
// revolution when its timeout is longer than the wheel (len(slots) ticks).
//
// Resolution: an entry with timeout d expires no earlier than d after its last activity
// and no later than d + 2 ticks after it (one tick for rounding d up, one because last is
// rounded down to its tick), given that the ticking goroutine is not starved (if it is,
// expiry is late, never early).
//
// Alternatives rejected: a time.Timer per connection (~100 B each plus runtime timer-heap
// work on every refresh, which is what net.Conn.SetReadDeadline does); a heap keyed by
// deadline (O(log n) on every refresh); a hierarchical wheel (the lazy re-check already
// handles long timeouts at one visit per revolution).
//
// Locking: mu guards the lists and every entry's timer fields. The activity tick is
// atomic and written without the lock. advance and run are called from one goroutine.
type wheel[T any, P wheelItem[T]] struct {
	tick  time.Duration
	start time.Time
	now   atomic.Uint32 // ticks since start, as of the last advance

	mu      sync.Mutex
	slots   []P // list heads; len is a power of two
	never   P   // entries without a timeout, kept so that each can walk them
	expired []P // scratch for advance
}

// A wheelItem is a pointer to a T that carries a timer and an activity tick.
type wheelItem[T any] interface {
	*T
	timed[T]
}

// timed is what a wheelItem carries.
type timed[T any] interface {
	timer() *timer[T]         // the wheel's bookkeeping, guarded by its lock
	activity() *atomic.Uint32 // the tick of the last activity
}

// A timer is the wheel's bookkeeping inside an item. It is guarded by wheel.mu.
type timer[T any] struct {
	prev, next *T
	slot       uint32 // slotNone, slotNever, or slotFirst + index into slots
	ticks      uint32 // timeout in ticks; 0: none
}

// Values of timer.slot; the zero value is "not in the wheel".
const (
	slotNone  = iota // not in the wheel
	slotNever        // in the never list
	slotFirst        // slot i is stored as slotFirst+i
)

// maxTicks caps a timeout so that deadlines compare correctly across uint32 wrap-around.
const maxTicks = 1 << 30

// newWheel returns a wheel of n slots (rounded up to a power of two) ticking every tick,
// with tick 0 at start.
func newWheel[T any, P wheelItem[T]](tick time.Duration, n int, start time.Time) *wheel[T, P] {
	size := 1
	for size < n {
		size <<= 1
	}
	return &wheel[T, P]{tick: tick, start: start, slots: make([]P, size)}
}

// ticksFor converts a timeout to ticks, rounding up; d <= 0 means no timeout.
func (w *wheel[T, P]) ticksFor(d time.Duration) uint32 {
	switch {
	case d <= 0:
		return 0
	case d/w.tick >= maxTicks:
		return maxTicks
	}
	return uint32((d + w.tick - 1) / w.tick)
}

// clock returns the current tick: by the clock, or the last advance if that is later.
func (w *wheel[T, P]) clock() uint32 {
	return max(uint32(time.Since(w.start)/w.tick), w.now.Load())
}

// touch records activity on p now: its deadline moves to a full timeout from now.
func (w *wheel[T, P]) touch(p P) {
	now := w.clock()
	if a := p.activity(); a.Load() != now {
		a.Store(now)
	}
}

// set gives p the timeout d counted from now, adding p to the wheel if it is not in it.
func (w *wheel[T, P]) set(p P, d time.Duration) {
	w.mu.Lock()
	w.setLocked(p, d)
	w.mu.Unlock()
}

// reset gives p the timeout d counted from now if p is in the wheel, and does nothing if it
// is not (it expired or was removed: it must not come back).
func (w *wheel[T, P]) reset(p P, d time.Duration) {
	w.mu.Lock()
	if p.timer().slot != slotNone {
		w.setLocked(p, d)
	}
	w.mu.Unlock()
}

func (w *wheel[T, P]) setLocked(p P, d time.Duration) {
	if p.timer().slot != slotNone {
		w.unlink(p)
	}
	p.timer().ticks = w.ticksFor(d)
	p.activity().Store(w.clock())
	w.place(p)
}

// renew puts p, taken out by advance as due, back in the wheel if open(p) holds: with a
// full timeout from now if held(p) (its activity cannot be seen), else only if it has
// had activity since and is no longer due. The predicates are checked under the lock, so
// that a remove that comes after open's condition ends still takes p out. It reports
// whether p is back; it does nothing if p is in the wheel.
func (w *wheel[T, P]) renew(p P, open, held func(P) bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.timer().slot != slotNone || !open(p) {
		return false
	}
	now := w.clock()
	switch {
	case held(p):
		p.activity().Store(now)
	case int32(now-(p.activity().Load()+p.timer().ticks+1)) >= 0:
		return false // due
	}
	w.place(p)
	return true
}

// remove takes p out of the wheel; it does nothing if p is not in it.
func (w *wheel[T, P]) remove(p P) {
	w.mu.Lock()
	if p.timer().slot != slotNone {
		w.unlink(p)
	}
	w.mu.Unlock()
}

// each calls fn for every entry, with the lock held: fn must not call the wheel.
func (w *wheel[T, P]) each(fn func(P)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, head := range w.slots {
		for p := head; p != nil; p = p.timer().next {
			fn(p)
		}
	}
	for p := w.never; p != nil; p = p.timer().next {
		fn(p)
	}
}

// advance moves the wheel's clock to tick to, visiting the slots passed on the way (every
// slot once at most), and calls expire, without the lock, for each entry whose deadline
// is due. Entries visited but not due move to the slot of their current deadline.
func (w *wheel[T, P]) advance(to uint32, expire func(P)) {
	w.mu.Lock()
	from := w.now.Load()
	if int32(to-from) <= 0 {
		w.mu.Unlock()
		return
	}
	steps := to - from
	if n := uint32(len(w.slots)); steps > n {
		steps = n
	}
	w.now.Store(to) // activity from here on is recorded at the new tick
	mask := uint32(len(w.slots) - 1)
	for i := uint32(1); i <= steps; i++ {
		s := (from + i) & mask
		p := w.slots[s]
		w.slots[s] = nil
		for p != nil {
			t := p.timer()
			next := t.next
			t.prev, t.next, t.slot = nil, nil, slotNone
			if due := p.activity().Load() + t.ticks + 1; t.ticks != 0 && int32(to-due) >= 0 {
				w.expired = append(w.expired, p)
			} else {
				w.place(p)
			}
			p = next
		}
	}
	expired := w.expired
	w.mu.Unlock()

	for i, p := range expired {
		expire(p)
		expired[i] = nil
	}
	w.expired = expired[:0]
}

// run advances the wheel every tick until done is closed. Ticks are derived from the
// monotonic time since start, so a late or dropped tick delays expiry but never skews it.
func (w *wheel[T, P]) run(done <-chan struct{}, expire func(P)) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			w.advance(uint32(now.Sub(w.start)/w.tick), expire)
		}
	}
}

// place links p, which is in no list, into the list its deadline calls for. Lock held.
func (w *wheel[T, P]) place(p P) {
	t := p.timer()
	head := &w.never
	t.slot = slotNever
	if t.ticks != 0 {
		due := p.activity().Load() + t.ticks + 1
		i := due & uint32(len(w.slots)-1)
		t.slot = slotFirst + i
		head = &w.slots[i]
	}
	t.prev = nil
	t.next = *head
	if *head != nil {
		(*head).timer().prev = p
	}
	*head = p
}

// unlink takes p, which is in a list, out of it. Lock held.
func (w *wheel[T, P]) unlink(p P) {
	t := p.timer()
	if t.prev != nil {
		P(t.prev).timer().next = t.next
	} else if t.slot == slotNever {
		w.never = t.next
	} else {
		w.slots[t.slot-slotFirst] = t.next
	}
	if t.next != nil {
		P(t.next).timer().prev = t.prev
	}
	t.prev, t.next, t.slot = nil, nil, slotNone
}
