// Package memory sets the Go runtime's memory limit and GC percent from the memory
// section of the config, hands memory back to the OS after spikes on the edge profile, and
// tells the broker how close it is to the limit so that it can refuse work before the
// kernel's OOM killer decides for it.
//
// # The limit drives the GC
//
// A Go heap grows to GOGC% above what survived the last collection before the next one
// starts. At the default GOGC=100 a server with a small live heap and a high allocation
// rate collects many times a second: each cycle takes mark CPU, and while it runs every
// allocating goroutine is drafted into mark assists, which shows as latency (the Twitch
// "heap ballast" article in the design's background reading measured 8–10 cycles a second,
// >30% of CPU in GC, and cut p99 latency by 45% with a 10 GiB ballast that made the heap
// look bigger). Today the same effect comes from two settings, applied by Apply:
//
//   - a soft memory limit (debug.SetMemoryLimit) near what the process may really use
//     (the cgroup's limit, else host memory, less headroom; see ResolveLimit), so the heap
//     can never grow into the OOM killer whatever GOGC says;
//   - a raised GOGC on the server profile (serverGCPercent, 400): the heap may grow to five
//     times the live heap, so a steady server collects four times less often than at 100,
//     and the limit caps that growth once the live heap is large; and, once Start runs,
//     at least 64 MiB of headroom whatever the live heap (the tuner in headroom.go), so
//     that a small heap does not collect many times a second under load.
//
// GOGC=off with only the limit (a pure ballast) was rejected: the heap would always grow to
// the limit, so RSS would sit at the limit on a quiet server, and a live heap near the limit
// makes the GC run back to back. The edge profile lowers GOGC to 50 (edgeGCPercent): its
// live heap is a few MB and it allocates little, so the extra cycles cost next to nothing,
// while every MB of headroom is RSS on a device that aims at 10 MB.
//
// An explicit GOGC or GOMEMLIMIT in the environment wins over the config (the runtime has
// applied it before main); Apply logs that it does.
//
// # Pressure and admission control
//
// Pressure reports None, Soft or Hard from the memory the kernel charges, less the heap
// the next GC frees, against the limit (charge.go; see Level for the thresholds and what
// the broker does at each). The broker reads it on its accept, CONNECT
// and publish paths: it costs one atomic load. OnChange tells it when the level changes.
// Between two samples the bytes the broker reads from publishers raise it too (Attach,
// Budget.Spend: one atomic add per PUBLISH).
//
// # Returning memory to the OS
//
// With memory.return_to_os > 0 (every 30 s on the edge profile, 1 s on the server) a
// goroutine checks periodically whether a spike, or a burst that has gone quiet, has left
// the runtime holding much more heap than it uses, and only then calls
// debug.FreeOSMemory; the rule is on releaseRule.
//
// The GC settings are process-wide. Two brokers in one process share them: the last Apply
// wins, and Close restores what was in force before its own Apply.
package memory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// GC percents per profile, used when GOGC is not set in the environment.
const (
	// serverGCPercent lets the heap grow to 5× the live heap between collections: four
	// times fewer cycles (and far fewer mark assists) than GOGC=100, while the memory
	// limit caps the heap once 5× live would not fit. It is used only with a limit.
	serverGCPercent = 400
	// edgeGCPercent keeps the heap at 1.5× live (at least 2 MiB: the runtime's minimum
	// heap is 4 MiB × GOGC/100). A device's RSS target is what matters, and an edge
	// broker allocates little: ~125 KB/s with 1,000 connections and 100 QoS 1 msgs/s
	// into the store, so with a live heap of ~3.5 MB it collects every ~15 s at 50,
	// each cycle a few ms of CPU. Measured with bench/edge-store.sh: RssAnon under
	// traffic 7.2 MiB (median) at 50 against 8.2 at 100; 25 gave 7.3, no better
	// (docs/benchmarks.md, "Edge profile with store").
	edgeGCPercent = 50
	// noLimitGCPercent is the runtime's default, kept when no limit could be determined:
	// without a cap a raised GOGC could grow the heap past what the machine has.
	noLimitGCPercent = 100
)

// A GoFunc starts a long-lived goroutine with a name and reports whether it did; the
// broker passes its own so that it counts and labels the goroutine and cancels ctx on
// shutdown.
type GoFunc func(name string, f func(ctx context.Context)) bool

// A Policy is the memory policy in force: the limit and GC percent applied by Apply, the
// pressure level, and the return-to-OS loop once started. Its methods are safe for
// concurrent use.
type Policy struct {
	log     *slog.Logger
	sys     system
	profile string

	envLimit bool // GOMEMLIMIT was set: the limit is the environment's
	envGOGC  bool // GOGC was set: the GC percent is the environment's

	prevLimit int64 // the runtime's limit before Apply, restored by Close
	prevGOGC  int   // the GC percent before Apply, restored by Close unless envGOGC

	limit atomic.Int64 // bytes; 0: no limit
	press pressure

	mu       sync.Mutex // guards the fields below
	from     Limit      // what the limit in force was resolved from
	gogc     int        // the GC percent in force
	interval time.Duration
	goFn     GoFunc
	running  bool          // the return-to-OS loop is running
	reset    chan struct{} // tells the loop that interval changed; buffered 1
	closed   bool
	done     chan struct{} // closed by Close

	tune *tuner // the server's headroom tuner once started (headroom.go); nil: none

	rel      releaser      // used by the loop only
	returned atomic.Uint64 // debug.FreeOSMemory calls made by the loop
	retBytes atomic.Uint64 // RSS those calls gave back
}

// system is what Apply reads from the outside world; tests replace it.
type system struct {
	fsys   fs.FS                   // the file system root: /proc and /sys/fs/cgroup
	getenv func(key string) string // os.Getenv
	read   func() runtimeSample    // readRuntime
	rss    func() (uint64, bool)   // readRSS of fsys
	free   func()                  // debug.FreeOSMemory
	gc     func()                  // runtime.GC; nil: never forced by the return-to-OS loop
	code   func()                  // ReleaseCode; nil: the loop never releases code pages

	setMemoryLimit func(int64) int64 // debug.SetMemoryLimit
	setGCPercent   func(int) int     // debug.SetGCPercent
}

func hostSystem() system {
	root := os.DirFS("/")
	return system{
		fsys:   root,
		getenv: os.Getenv,
		read:   readRuntime,
		rss:    func() (uint64, bool) { return readRSS(root) },
		free:   debug.FreeOSMemory,
		gc:     runtime.GC,
		code:   func() { _, _ = ReleaseCode() },

		setMemoryLimit: debug.SetMemoryLimit,
		setGCPercent:   debug.SetGCPercent,
	}
}

// Apply resolves the memory limit of cfg (see ResolveLimit), sets it and the profile's GC
// percent in the runtime unless GOMEMLIMIT or GOGC in the environment say otherwise, and
// starts sampling the pressure level. cfg must be validated, defaults filled. The
// return-to-OS loop starts with Start. A nil log discards.
func Apply(cfg conf.Memory, log *slog.Logger) (*Policy, error) {
	return apply(cfg, log, hostSystem())
}

func apply(cfg conf.Memory, log *slog.Logger, sys system) (*Policy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lim, err := ResolveLimit(cfg, sys.fsys)
	if err != nil {
		return nil, err
	}
	p := &Policy{
		log:      log,
		sys:      sys,
		profile:  cfg.Profile,
		envLimit: sys.getenv("GOMEMLIMIT") != "",
		envGOGC:  sys.getenv("GOGC") != "",
		reset:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		// Read, not set: SetMemoryLimit with a negative value only reports.
		prevLimit: sys.setMemoryLimit(-1),
	}
	if cfg.ReturnToOS != nil {
		p.interval = time.Duration(*cfg.ReturnToOS)
	}
	p.setLimit(lim)
	from := lim.String()
	if p.envLimit {
		from = "GOMEMLIMIT"
		log.Info("memory: GOMEMLIMIT from the environment overrides memory.limit",
			"gomemlimit", formatBytes(p.limit.Load()), "memory_limit", formatBytes(lim.Bytes))
	}

	if p.envGOGC {
		p.gogc = readGCPercent()
		log.Info("memory: GOGC from the environment overrides the profile's GC percent",
			"gogc", p.gogc, "profile_gogc", gcPercent(cfg.Profile, lim.Bytes))
	} else {
		p.gogc = gcPercent(cfg.Profile, p.limit.Load())
		p.prevGOGC = sys.setGCPercent(p.gogc)
	}
	p.rel.rule = newReleaseRule(p.limit.Load(), p.interval)
	p.press.init(p.limit.Load, sys.read, log)
	p.setMeter(lim)
	p.press.start()
	log.Info("memory policy",
		"profile", cfg.Profile, "limit", formatBytes(p.limit.Load()), "from", from,
		"gogc", p.gogc, "return_to_os", p.interval, "pressure_from", p.press.meter.Load().what)
	return p, nil
}

// setMeter sets what pressure is computed from for the limit lim (charge.go).
func (p *Policy) setMeter(lim Limit) {
	m := newMeter(p.sys.fsys, lim, p.envLimit)
	p.press.meter.Store(&m)
}

// setLimit records lim and sets it in the runtime, unless GOMEMLIMIT governs; either way
// the limit kept is the one the runtime reports back. A limit of 0 puts back the one that
// was in force before Apply.
func (p *Policy) setLimit(lim Limit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.from = lim
	switch {
	case p.envLimit:
		// The runtime applied GOMEMLIMIT at start; keep it.
	case lim.Bytes <= 0:
		p.log.Warn("memory: no memory limit: neither a cgroup limit nor host memory could be read; set memory.limit")
		p.sys.setMemoryLimit(p.prevLimit)
	default:
		p.sys.setMemoryLimit(lim.Bytes)
	}
	p.limit.Store(p.runtimeLimit())
}

// runtimeLimit returns the runtime's memory limit, 0 when there is none.
func (p *Policy) runtimeLimit() int64 {
	if l := p.sys.setMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}

// gcPercent is the GC percent of a profile given the limit in force (0: none).
func gcPercent(profile string, limit int64) int {
	switch {
	case profile == conf.ProfileEdge:
		return edgeGCPercent
	case limit <= 0:
		return noLimitGCPercent
	default:
		return serverGCPercent
	}
}

// Start starts the return-to-OS loop through goFn when memory.return_to_os is positive,
// and keeps goFn to start it later if a reload turns it on. Call it once, after Apply.
func (p *Policy) Start(goFn GoFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.goFn = goFn
	p.startLocked()
	p.tuneLocked()
}

// tuneLocked starts the headroom tuner on a server with a memory limit whose GC percent is
// the policy's, retunes a running one for the limit in force, and stops it when the limit
// is gone. p.mu is held on entry.
func (p *Policy) tuneLocked() {
	limit := p.limit.Load()
	want := !p.envGOGC && !p.closed && p.goFn != nil && p.profile != conf.ProfileEdge && limit > 0
	switch {
	case want && p.tune == nil:
		t := &tuner{base: p.gogc, headroom: headroomFor(limit), cur: p.gogc,
			read: p.sys.read, set: p.sys.setGCPercent}
		p.tune = t
		t.adjust()
		f := func() { t.adjust() }
		p.press.after.Store(&f)
	case want:
		p.tune.reset(p.gogc, headroomFor(limit))
	case p.tune != nil:
		p.press.after.Store(nil)
		p.tune.stop()
		p.tune = nil
		if !p.envGOGC {
			p.sys.setGCPercent(p.gogc)
		}
	}
}

// startLocked starts the loop if it should run and does not. p.mu is held on entry.
func (p *Policy) startLocked() {
	if p.running || p.closed || p.goFn == nil || p.interval <= 0 {
		return
	}
	p.running = p.goFn("memory-return", p.returnLoop)
}

// Reload applies a new memory.limit and memory.return_to_os (the profile cannot change
// while running). The pressure level is recomputed against the new limit at once.
func (p *Policy) Reload(cfg conf.Memory) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return errClosed
	}
	lim, err := ResolveLimit(cfg, p.sys.fsys)
	if err != nil {
		return err
	}
	p.setLimit(lim)
	p.setMeter(lim)
	if !p.envGOGC {
		// Going from no limit to one (or back) changes the server's GC percent.
		p.mu.Lock()
		if g := gcPercent(p.profile, p.limit.Load()); g != p.gogc {
			p.gogc = g
			if p.tune == nil {
				p.sys.setGCPercent(g)
			}
		}
		p.tuneLocked()
		p.mu.Unlock()
	}
	p.press.refresh()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.interval = 0
	if cfg.ReturnToOS != nil {
		p.interval = time.Duration(*cfg.ReturnToOS)
	}
	if p.running {
		select {
		case p.reset <- struct{}{}:
		default: // a reset is pending already; the loop reads interval when it takes it
		}
	}
	p.startLocked()
	return nil
}

// Limit returns the soft memory limit in force in bytes, 0 when there is none.
func (p *Policy) Limit() int64 { return p.limit.Load() }

// GCPercent returns the GC percent in force (GOGC): the profile's after Apply, the
// headroom tuner's once Start has started it.
func (p *Policy) GCPercent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tune != nil {
		return p.tune.percent()
	}
	return p.gogc
}

// Resolved returns the limit memory.limit resolved to at the last Apply or Reload, with
// what it was derived from. Under GOMEMLIMIT it is not the limit in force (see Limit).
func (p *Policy) Resolved() Limit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.from
}

// Pressure returns the memory pressure level as of the last sample: one atomic load.
func (p *Policy) Pressure() Level { return p.press.level() }

// OnChange sets f to run after each sample that changes the pressure level (nil: none),
// on the goroutine that sampled: the GC's cleanup goroutine, a recheck's timer, or
// Reload's caller. f reads the new level with Pressure; two changes close together may
// run f concurrently, and f may see a later level than the one that called it.
func (p *Policy) OnChange(f func()) {
	if f == nil {
		p.press.changed.Store(nil)
		return
	}
	p.press.changed.Store(&f)
}

// HardTime returns the time spent at Hard since Apply.
func (p *Policy) HardTime() time.Duration { return p.press.hardTime() }

// Close stops the return-to-OS loop and the pressure sampling, and restores the memory
// limit and GC percent that were in force before Apply (those Apply set). It is
// idempotent.
func (p *Policy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.done)
	p.press.stop()
	if p.tune != nil {
		p.press.after.Store(nil)
		p.tune.stop()
		p.tune = nil
	}
	if !p.envLimit {
		p.sys.setMemoryLimit(p.prevLimit)
	}
	if !p.envGOGC {
		p.sys.setGCPercent(p.prevGOGC)
	}
}

// errClosed is returned by Reload after Close.
var errClosed = errors.New("memory: policy closed")

// errResolve wraps every error reading the available memory.
var errResolve = errors.New("memory: cannot determine memory.limit: auto (set memory.limit to a size)")

// formatBytes formats n for logs: 409.6MiB; "none" for 0.
func formatBytes(n int64) string {
	switch {
	case n <= 0:
		return "none"
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
}
