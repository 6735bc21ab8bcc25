package memory

import (
	"math"
	"sync/atomic"
	"time"
)

// The intake budget: pressure between two samples
//
// The level is sampled at the end of a GC cycle (pressure.go): only then is the live heap
// known. Between two cycles a fast publisher can have its whole Receive Maximum window
// read and queued: 64 messages of 16 KiB each, 1.5 MiB with what came beside them, read in
// 70 ms. In a 12 MiB cgroup that is the headroom between soft and the kernel's limit, and
// the kernel killed the broker before the next sample saw the level reach hard.
//
// So the broker also counts what it takes in. A Budget holds the bytes that may still be
// read and queued before the level the last sample gave would reach the next one (soft
// from none, hard from soft), taking what was taken in since as live. Spending it is one
// atomic add on the publish path. The publish that overdraws it raises the level at once,
// on the estimate (the sample's figure plus the bytes taken in since), and has a GC run
// whose sample replaces the estimate. A sample within the raised level's hysteresis
// confirms it; one below undoes it at once, without the hold a sampled raise gets, as
// what was counted may have been delivered and freed already (a broker that forwards
// fast raises the estimate without holding anything).
//
// Rejected: sampling on a timer (the live heap is only known after a GC, so a timer's
// sample cannot see what was queued); sampling in the publish path (the same, and a file
// read per message); a GC per N bytes (a GC on an edge heap is a few ms, too much to pay
// on every window of a broker with room to spare).

// A Budget counts the bytes the broker takes in against the headroom the last pressure
// sample left. The zero Budget is not attached to a Policy and never raises the level.
// Its methods are safe for concurrent use. It is 64 bytes: allocated on its own (the
// 64-byte size class) it fills a cache line, which every publish writes.
type Budget struct {
	left atomic.Int64             // bytes that may be taken in before the next level
	p    atomic.Pointer[pressure] // the pressure it raises; nil: not attached
	_    [64 - 8 - 8]byte
}

// unlimited is a Budget's allowance when no level lies above: at hard, with no limit, or
// not attached. Spending it down takes longer than any broker runs.
const unlimited = math.MaxInt64 / 2

// Spend counts n bytes taken in (a PUBLISH read). The call that overdraws the budget
// raises the pressure level on the estimate, so the Pressure read right after sees it.
// It is inlined: one atomic add and a branch.
func (b *Budget) Spend(n int) {
	if b.left.Add(-int64(n)) <= 0 {
		b.overdrawn()
	}
}

// overdrawn is Spend's slow path, taken once per level at most between two samples
// (and by the calls that overdraw it together).
func (b *Budget) overdrawn() {
	if p := b.p.Load(); p != nil {
		p.overdrawn(b)
		return
	}
	b.left.Store(unlimited)
}

// Attach makes b the budget of p's pressure, set from the last sample, until Close. A
// Policy has one budget at a time; b may be attached to one Policy at a time.
func (p *Policy) Attach(b *Budget) { p.press.attach(b) }

func (p *pressure) attach(b *Budget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.Load() {
		return
	}
	b.p.Store(p)
	p.budget.Store(b)
	p.resetBudget(p.level(), p.used.Load(), uint64(max(p.limit(), 0)))
}

// detach ends the budget's tie to p, leaving it unlimited. p.mu is held.
func (p *pressure) detach() {
	if b := p.budget.Swap(nil); b != nil {
		b.p.Store(nil)
		b.left.Store(unlimited)
	}
}

// headroom returns the bytes from used up to the threshold of the level above l, or
// unlimited when there is none above (or no limit).
func headroom(l Level, used, limit uint64) int64 {
	pct := uint64(softPercent)
	switch {
	case limit == 0 || l >= Hard:
		return unlimited
	case l == Soft:
		pct = hardPercent
	}
	at := limit * pct / 100
	if used >= at {
		return 0
	}
	return int64(at - used)
}

// resetBudget sets the budget to the headroom a sample left. p.mu is held.
func (p *pressure) resetBudget(l Level, used, limit uint64) {
	if b := p.budget.Load(); b != nil {
		p.allowed = headroom(l, used, limit)
		b.left.Store(p.allowed)
	}
}

// overdrawn raises the level on the estimate once b is spent, and has a GC sample it.
func (p *pressure) overdrawn(b *Budget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.Load() {
		b.left.Store(unlimited)
		return
	}
	if b.left.Load() > 0 {
		return // another call raised it, or a sample reset it
	}
	taken := uint64(max(p.allowed-b.left.Load(), 0))
	est := p.used.Load() + taken
	limit := uint64(max(p.limit(), 0))
	prev := p.level()
	next := nextLevel(prev, est, limit)
	if next <= prev {
		// The allowance was for a level raised since: count on from here.
		room := max(headroom(next, est, limit), 64<<10)
		p.allowed += room
		b.left.Add(room)
		return
	}
	p.estimated = true
	p.estimates.Add(1)
	p.cur.Store(uint32(next))
	if next == Hard {
		p.hardSince.Store(max(p.now().UnixNano(), 1))
	}
	room := headroom(next, est, limit)
	p.allowed += room
	b.left.Add(room)
	p.log.Warn("memory: pressure rising", "level", next.String(), "was", prev.String(),
		"used", formatBytes(int64(est)), "limit", formatBytes(int64(limit)),
		"taken_in_since_sample", formatBytes(int64(taken)))
	if p.collecting.CompareAndSwap(false, true) {
		time.AfterFunc(0, p.collect)
	}
}

// collect runs a GC and samples, replacing a level raised on the estimate.
func (p *pressure) collect() {
	defer p.collecting.Store(false)
	if p.stopped.Load() {
		return
	}
	p.gc() // the GC hook samples; so does the refresh, where the hook is not armed (tests)
	p.refresh()
}
