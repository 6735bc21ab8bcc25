package memory

import (
	"context"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// A releaseRule decides when the return-to-OS loop calls debug.FreeOSMemory. At every
// check (every memory.return_to_os) it samples RSS and the runtime's heap figures, and it
// releases when one of two conditions holds, and the last release was at least Spacing
// ago:
//
//   - a spike, at Checks consecutive checks: RSS is above Target (there is something
//     worth giving back), and the heap the runtime holds (Retained: objects, their spans'
//     free space and free spans not yet released) is at least 1.5× the heap goal and at
//     least MinSlack above it: the heap has shrunk well below what a spike made the
//     runtime map;
//   - quiet, over the interval since the previous check: RSS is above QuietFloor, the
//     heap holds at least max(MinSlack, live/4) more than the live heap (the slack), and
//     the program allocated so little since the previous check that at this pace it would
//     take QuietHorizon to use the slack again.
//
// Why these rules: FreeOSMemory forces a full GC and then returns every free page, so it
// costs a cycle's CPU and, if the memory is needed again soon, page faults to get it back.
// In steady state the runtime holds about its goal (the scavenger trims it to ~110%), so
// the spike test is false and a broker that is just busy is never released, however high
// its RSS: no thrash. A busy broker is never quiet either: it allocates its slack within an
// interval or two. After a release the runtime holds about its live heap, so neither test
// can come true again before new garbage or a new spike. Two spike checks in a row mean
// the memory has stayed unused for at least one interval; a quiet check covers a whole
// interval by itself. The spacing bounds the cost when either comes back faster. The runtime's own scavenger would return the memory
// too, but only down to the heap goal and paced at about 1% of a CPU; on a device the
// spike's memory belongs to other programs.
//
// The quiet rule is the server's: the server profile lets the heap grow to five times the
// live heap between cycles (serverGCPercent) so that a busy broker collects rarely. A
// broker that then goes quiet, typically holding many idle connections after they all
// connected at once, would keep that garbage's pages for good; the quiet rule gives them
// back once, so that idle connections cost their live state and not the headroom of the
// burst that opened them. The server checks every second, so that happens a second or two
// after the burst ends: a connect burst's garbage is what makes a broker just filled with
// idle clients look twice their size, and it does not wait for the minutes-later GC the
// runtime forces. The pace is in time, not in checks, so that a short interval does not
// make a slowly allocating broker look quiet.
//
// The live heap, and so the goal, is measured by the last GC. An idle broker after a
// spike may run none until the runtime's forced one, two minutes on, so when RSS is above
// Target and no cycle ran since the previous check the loop forces one first
// (Policy.checkReturn): the spike is then released within two checks.
type releaseRule struct {
	Target       uint64        // RSS above which a spike is released
	QuietFloor   uint64        // RSS above which a quiet broker is released
	MinSlack     uint64        // Retained must exceed the goal by at least this much
	Checks       int           // consecutive checks a spike must hold
	QuietHorizon time.Duration // a quiet broker would use its slack again in no less
	Spacing      time.Duration // least time between two releases
}

// Defaults of the release rule.
const (
	// releaseTargetMin: the edge profile aims at ~15 MB RSS; below 16 MiB nothing is
	// worth a forced GC. A larger limit raises the target to a quarter of it.
	releaseTargetMin = 16 << 20
	// releaseQuietFloor: a quiet broker below 16 MiB of RSS has nothing worth a GC either,
	// whatever its limit.
	releaseQuietFloor = 16 << 20
	// releaseMinSlack: less than 2 MiB back is not worth a full GC, even on a device.
	releaseMinSlack = 2 << 20
	releaseChecks   = 2
	// releaseHorizon: the quiet pace, eight of the server's former 5 s checks. A
	// longer interval (the edge's 30 s) asks for eight of its own.
	releaseHorizon  = 40 * time.Second
	releaseHorizonN = 8
	// releaseSpacing is the runtime's own forced-GC period: the policy never forces
	// collections more often than the runtime does on an idle process.
	releaseSpacing = 2 * time.Minute
)

// newReleaseRule returns the rule for a memory limit (0: none) and checks every interval.
func newReleaseRule(limit int64, interval time.Duration) releaseRule {
	return releaseRule{
		Target:       max(uint64(max(limit, 0))/4, releaseTargetMin),
		QuietFloor:   releaseQuietFloor,
		MinSlack:     releaseMinSlack,
		Checks:       releaseChecks,
		QuietHorizon: max(releaseHorizon, releaseHorizonN*interval),
		Spacing:      releaseSpacing,
	}
}

// A releaseSample is what one check sees.
type releaseSample struct {
	RSS      uint64 // resident set size
	Retained uint64 // runtimeSample.Retained
	Goal     uint64 // runtimeSample.Goal
	Live     uint64 // runtimeSample.Live
	Allocs   uint64 // runtimeSample.Allocs: cumulative
}

// spike reports whether the heap the runtime holds is well above what it plans to use.
func (r releaseRule) spike(s releaseSample) bool {
	return s.Retained >= s.Goal+s.Goal/2 && s.Retained-s.Goal >= r.MinSlack
}

// quiet reports whether the heap holds slack that the program, having allocated
// allocated bytes over elapsed, would not use again within QuietHorizon.
func (r releaseRule) quiet(s releaseSample, allocated uint64, elapsed time.Duration) bool {
	if s.RSS <= r.QuietFloor || s.Retained <= s.Live || elapsed <= 0 {
		return false
	}
	slack := s.Retained - s.Live
	return slack >= max(r.MinSlack, s.Live/4) &&
		float64(allocated)*r.QuietHorizon.Seconds() <= float64(slack)*elapsed.Seconds()
}

// A releaser applies a releaseRule to a sequence of checks. It is not safe for concurrent
// use: the return-to-OS loop owns it.
type releaser struct {
	rule   releaseRule
	streak int       // consecutive checks at which a spike held
	last   time.Time // of the last release; zero: none yet
	allocs uint64    // Allocs at the previous check
	prev   time.Time // of the previous check
	seen   bool      // allocs and prev are set: there was a previous check
	cycles uint64    // GC cycles at the previous check
	forced time.Time // of the last GC forced to refresh a stale sample
	least  uint64    // the least RSS a check has seen (edgeCheck)
}

// staleGCSpacing is the least time between two GCs the return-to-OS loop forces to refresh
// a stale sample (see Policy.checkReturn): the edge profile's interval, and a server
// checking every second pays at most one extra GC per 30 s, and only above Target.
const staleGCSpacing = 30 * time.Second

// check records a check at now and reports whether to release.
func (r *releaser) check(now time.Time, s releaseSample) bool {
	quiet := r.seen && s.Allocs >= r.allocs && r.rule.quiet(s, s.Allocs-r.allocs, now.Sub(r.prev))
	r.allocs, r.prev, r.seen = s.Allocs, now, true
	if s.RSS > r.rule.Target && r.rule.spike(s) {
		r.streak++
	} else {
		r.streak = 0
	}
	if !quiet && r.streak < r.rule.Checks || (!r.last.IsZero() && now.Sub(r.last) < r.rule.Spacing) {
		return false
	}
	r.streak = 0
	r.last = now
	return true
}

// The edge profile's own release. A spike leaves an edge broker (5-7 MiB of RSS) above
// what it needs in two ways the heap rules above cannot see: the heap the runtime has
// already scavenged does not count as slack, and the executable's pages the spike's code
// paths faulted in (several MiB: ReleaseCode let them go at start) stay resident. So on
// the edge profile every check that finds RSS at more than edgeRelease times the least
// it has seen (and edgeReleaseMin at least) frees the heap and releases the code pages
// again. Pages in use come back on their next touch, from the page cache: a minor fault
// each. A device that stays above that line pays it every check (30 s): two GCs of a
// small heap and the refaults of its working set, a few milliseconds.
const (
	edgeRelease    = 2
	edgeReleaseMin = 8 << 20
)

// edgeCheck applies the edge profile's release at a check that found rss; it reports
// whether it released.
func (p *Policy) edgeCheck(rss uint64) bool {
	r := &p.rel
	if r.least == 0 || rss < r.least {
		r.least = rss
	}
	if p.profile != conf.ProfileEdge || p.sys.code == nil || rss <= max(edgeRelease*r.least, edgeReleaseMin) {
		return false
	}
	// Twice: what sync.Pools held (the broker's buffer pools, full after a spike) survives
	// one cycle in their victim caches and is dropped by the next.
	p.sys.free()
	p.sys.free()
	p.sys.code()
	after := p.rss(p.sys.read())
	p.returned.Add(1)
	if after < rss {
		p.retBytes.Add(rss - after)
	}
	p.log.Debug("memory: returned memory and code pages to the OS",
		"rss_before", formatBytes(int64(rss)), "rss_after", formatBytes(int64(after)))
	return true
}

// returnLoop checks every memory.return_to_os whether to hand memory back to the OS, until
// ctx is done, the policy closes, or a reload sets the interval to 0.
func (p *Policy) returnLoop(ctx context.Context) {
	p.mu.Lock()
	interval := p.interval
	p.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	// The first check can then tell how much was allocated since the loop started.
	rt := p.sys.read()
	p.rel.allocs, p.rel.cycles, p.rel.prev, p.rel.seen = rt.Allocs, rt.Cycles, time.Now(), true
	for {
		select {
		case <-ctx.Done():
			p.loopStopped()
			return
		case <-p.done:
			return
		case <-p.reset:
			p.mu.Lock()
			interval = p.interval
			if interval <= 0 {
				p.running = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			t.Reset(interval)
			p.rel.streak = 0 // checks at another pace are not consecutive
		case now := <-t.C:
			p.checkReturn(now)
		}
	}
}

func (p *Policy) loopStopped() {
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
}

// checkReturn runs one check of the release rule and releases if it says so.
func (p *Policy) checkReturn(now time.Time) {
	p.mu.Lock()
	interval := p.interval
	p.mu.Unlock()
	p.rel.rule = newReleaseRule(p.limit.Load(), interval) // the limit may have been reloaded
	rt := p.sys.read()
	rss := p.rss(rt)
	// The live heap and the goal are the last GC's. After a spike an idle broker may not
	// collect until the runtime's forced GC, two minutes on, and until then the figures
	// are the spike's: neither rule can see the memory is free. So when RSS is worth a
	// release and no cycle ran since the previous check, a GC refreshes them first.
	if p.sys.gc != nil && rss > p.rel.rule.Target && rt.Cycles == p.rel.cycles &&
		now.Sub(p.rel.forced) >= staleGCSpacing {
		p.rel.forced = now
		p.sys.gc()
		rt = p.sys.read()
		rss = p.rss(rt)
	}
	p.rel.cycles = rt.Cycles
	if p.edgeCheck(rss) {
		return
	}
	if !p.rel.check(now, releaseSample{RSS: rss, Retained: rt.Retained(), Goal: rt.Goal,
		Live: rt.Live, Allocs: rt.Allocs}) {
		return
	}
	p.sys.free()
	after := p.rss(p.sys.read())
	p.returned.Add(1)
	if after < rss {
		p.retBytes.Add(rss - after)
	}
	p.log.Debug("memory: returned memory to the OS",
		"rss_before", formatBytes(int64(rss)), "rss_after", formatBytes(int64(after)))
}

// rss returns the resident set size, or the runtime's mapped memory where /proc is not
// available.
func (p *Policy) rss(rt runtimeSample) uint64 {
	if v, ok := p.sys.rss(); ok {
		return v
	}
	return rt.Mapped()
}
