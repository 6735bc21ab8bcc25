package memory

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A Level is how close the process is to its memory limit; the broker's admission control
// acts on it. Levels are ordered: a higher one implies the actions of the lower ones.
type Level uint32

// Pressure levels.
const (
	// None: admit everything.
	None Level = iota
	// Soft (used ≥ 80% of the limit): refuse new connections (CONNACK quota exceeded;
	// 3.1.1: server unavailable) and shed QoS 0 messages queued for slow consumers. What
	// is left of the limit is kept for the clients already connected.
	Soft
	// Hard (used ≥ 90%): also stop reading from connections that publish, so that
	// backpressure reaches them through TCP instead of the heap growing until the kernel
	// kills the process; subscribers are still read and written to, so their queues drain.
	// Reading resumes once the level falls below Hard (Policy.OnChange).
	Hard
)

// String returns none, soft or hard.
func (l Level) String() string {
	switch l {
	case Soft:
		return "soft"
	case Hard:
		return "hard"
	default:
		return "none"
	}
}

// Thresholds of the pressure levels, in percent of the limit.
//
// The figure compared with the limit is what the kernel charges for the process's memory
// less the heap the next GC frees (charge.go). It is not the heap in use: with GOGC=400
// the heap grows towards the limit between cycles by design, and garbage is not pressure.
// The live heap only changes when a GC cycle ends, so it is sampled then.
//
// Soft at 80% leaves the last fifth of the limit to the clients already connected; Hard
// at 90% stops intake before the soft limit makes the GC run back to back. A level is left
// only once Used is hysteresisPercent below its threshold, so that admission does not flip
// on every cycle while Used hovers at a threshold.
const (
	softPercent       = 80
	hardPercent       = 90
	hysteresisPercent = 5
)

// Holding a level, and checking again while it holds.
//
// Used is sampled at the end of each GC, and under a surge it swings with the bytes in
// flight at that moment: in a 16 MiB cgroup the level went none → soft → hard → none
// several times in 100 ms, admitting a client at every dip and logging every change. So a
// level, once raised, is held for at least holdDown before it may fall. A rise is never
// delayed.
//
// Leaving a level needs a sample, and a sample needs a GC: a broker whose load has just
// fallen may allocate so little that the next cycle comes with the runtime's forced GC,
// two minutes later, and it would refuse every client until then. So while the level is
// above none, every recheckEvery a GC is forced if none ran since the last check: a few
// milliseconds of CPU on an edge heap, and a server under pressure is collecting all the
// time anyway. Recovery after the load falls then takes at most holdDown plus two checks.
const (
	holdDown     = time.Second
	recheckEvery = 2 * time.Second
)

// nextLevel returns the level for used bytes against limit, given the previous level.
// A limit of 0 (none) is never under pressure.
func nextLevel(prev Level, used, limit uint64) Level {
	if limit == 0 {
		return None
	}
	pct := float64(used) * 100 / float64(limit)
	switch {
	case pct >= hardPercent || prev == Hard && pct >= hardPercent-hysteresisPercent:
		return Hard
	case pct >= softPercent || prev >= Soft && pct >= softPercent-hysteresisPercent:
		return Soft
	default:
		return None
	}
}

// pressure holds the current level for the hot path and refreshes it at the end of every
// GC cycle; between cycles the intake budget may raise it (budget.go).
//
// Why at GC end and not on a timer: the live heap is only measured by a GC, so sampling
// more often learns nothing new and a timer would wake an idle broker for nothing; and when
// memory is tight the limit makes cycles frequent, so the level follows closely exactly
// when it matters. Reading the figures costs a few microseconds against a cycle's
// milliseconds. The hook is a cleanup on a sentinel object that re-arms itself; between
// cycles Pressure is one atomic load.
type pressure struct {
	cur     atomic.Uint32 // Level
	used    atomic.Uint64 // pressureUsed at the last sample
	samples atomic.Uint64 // samples taken, for tests
	stopped atomic.Bool
	// after, when set, runs after each cycle's sample (the headroom tuner).
	after atomic.Pointer[func()]
	// changed, when set, runs after a sample that changed the level, outside mu.
	changed atomic.Pointer[func()]
	// meter, when set, reads what the kernel charges; nil: the runtime's figure alone.
	meter atomic.Pointer[meter]
	// hardNanos is the time spent at Hard before hardSince; hardSince is when the level
	// last rose to Hard (Unix nanoseconds), 0 while it is below.
	hardNanos, hardSince atomic.Int64
	// budget, when set, is the broker's intake budget, reset at every sample (budget.go).
	budget     atomic.Pointer[Budget]
	estimates  atomic.Uint64 // levels raised on the budget's estimate, for tests
	collecting atomic.Bool   // a GC asked for by an estimate is under way

	limit func() int64
	read  func() runtimeSample
	log   *slog.Logger
	// now and gc are time.Now and runtime.GC; hold and every are holdDown and
	// recheckEvery. Tests replace them.
	now         func() time.Time
	gc          func()
	hold, every time.Duration

	mu      sync.Mutex  // serializes refresh (the GC hook and Reload); guards the fields below
	raised  time.Time   // when the level last rose on a sample
	sampled Level       // the level the last sample gave
	recheck *time.Timer // runs while the level is above none
	checked uint64      // samples at the last recheck
	// allowed is what the budget was given since the last sample; estimated: the level
	// was raised on its estimate since (budget.go).
	allowed   int64
	estimated bool
}

// gcSentinel is allocated to be collected. It holds a pointer so that it is not placed
// in a tiny-allocator block, whose cleanups wait for every object in the block to die.
type gcSentinel struct{ _ *byte }

// init sets where the samples come from.
func (p *pressure) init(limit func() int64, read func() runtimeSample, log *slog.Logger) {
	p.limit, p.read, p.log = limit, read, log
	p.now, p.gc, p.hold, p.every = time.Now, runtime.GC, holdDown, recheckEvery
}

// start takes the first sample and arms the GC hook. init must have been called.
func (p *pressure) start() {
	p.refresh()
	p.arm()
}

// stop ends the GC hook at the next cycle, and the rechecks.
func (p *pressure) stop() {
	p.stopped.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.detach()
	if p.recheck != nil {
		p.recheck.Stop()
		p.recheck = nil
	}
}

func (p *pressure) arm() {
	runtime.AddCleanup(&gcSentinel{}, onGC, p)
}

// onGC runs after each GC cycle that swept the sentinel.
func onGC(p *pressure) {
	if p.stopped.Load() {
		return
	}
	p.refresh()
	if f := p.after.Load(); f != nil {
		(*f)()
	}
	p.arm()
}

// level returns the level of the last sample.
func (p *pressure) level() Level { return Level(p.cur.Load()) }

// refresh samples the runtime and the kernel's charge and updates the level, logging
// changes; after a change it runs the changed hook.
func (p *pressure) refresh() {
	if p.refreshLocked() {
		if f := p.changed.Load(); f != nil {
			(*f)()
		}
	}
}

// refreshLocked is refresh under mu; it reports whether the level changed.
func (p *pressure) refreshLocked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.read()
	var charged uint64
	ok := false
	if m := p.meter.Load(); m != nil {
		charged, ok = m.read()
	}
	used := pressureUsed(s, charged, ok)
	limit := uint64(max(p.limit(), 0))
	prev := p.level()
	next := nextLevel(prev, used, limit)
	now := p.now()
	// A level raised on the budget's estimate stands if this sample confirms it (within
	// its hysteresis, as a sampled level would); the hold keeps only what samples gave.
	held := prev
	if p.estimated {
		held = p.sampled
	}
	switch {
	case next > held:
		p.raised = now
	case next < held && now.Sub(p.raised) < p.hold:
		next = held
	}
	p.estimated = false
	p.sampled = next
	p.used.Store(used)
	p.resetBudget(next, used, limit)
	switch {
	case next == Hard && prev != Hard:
		p.hardSince.Store(max(now.UnixNano(), 1))
	case next != Hard && prev == Hard:
		p.hardNanos.Add(now.UnixNano() - p.hardSince.Load())
		p.hardSince.Store(0)
	}
	p.cur.Store(uint32(next))
	p.samples.Add(1)
	if next > None && p.recheck == nil && !p.stopped.Load() {
		p.checked = p.samples.Load()
		p.recheck = time.AfterFunc(p.every, p.onRecheck)
	}
	if next == prev {
		return false
	}
	attrs := []any{"level", next.String(), "was", prev.String(),
		"used", formatBytes(int64(used)), "limit", formatBytes(int64(limit))}
	if next > prev {
		p.log.Warn("memory: pressure rising", attrs...)
	} else {
		p.log.Info("memory: pressure falling", attrs...)
	}
	return true
}

// hardTime returns the time spent at Hard so far.
func (p *pressure) hardTime() time.Duration {
	d := p.hardNanos.Load()
	if since := p.hardSince.Load(); since != 0 {
		d += max(p.now().UnixNano()-since, 0)
	}
	return time.Duration(d)
}

// onRecheck runs every p.every while the level is above none: it forces a GC, whose hook
// samples again, if no sample was taken since the last check, and stops once the level
// is none.
func (p *pressure) onRecheck() {
	p.mu.Lock()
	if p.stopped.Load() || p.level() == None {
		p.recheck = nil
		p.mu.Unlock()
		return
	}
	idle := p.samples.Load() == p.checked
	p.mu.Unlock()
	if idle {
		p.gc() // the hook refreshes; a fall held by holdDown is decided now
		p.refresh()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = p.samples.Load()
	if p.recheck != nil && !p.stopped.Load() {
		p.recheck.Reset(p.every)
	}
}
