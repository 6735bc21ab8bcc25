package memory

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

func TestNextLevel(t *testing.T) {
	const limit = 1000
	tests := []struct {
		prev Level
		used uint64
		want Level
	}{
		{None, 0, None},
		{None, 799, None},
		{None, 800, Soft},
		{None, 899, Soft},
		{None, 900, Hard},
		{None, 1500, Hard}, // past the soft limit
		{Soft, 760, Soft},  // within the hysteresis band
		{Soft, 750, Soft},
		{Soft, 749, None},
		{Soft, 900, Hard},
		{Hard, 860, Hard}, // within the hysteresis band
		{Hard, 850, Hard},
		{Hard, 849, Soft},
		{Hard, 749, None},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.prev, tt.used), func(t *testing.T) {
			if got := nextLevel(tt.prev, tt.used, limit); got != tt.want {
				t.Fatalf("nextLevel(%s, %d, %d) = %s, want %s", tt.prev, tt.used, limit, got, tt.want)
			}
		})
	}
	if got := nextLevel(Hard, 1<<40, 0); got != None {
		t.Fatalf("without a limit: %s, want none", got)
	}
}

func TestUsed(t *testing.T) {
	s := runtimeSample{
		Live:     10 * mib,
		Total:    64 * mib,
		Objects:  30 * mib, // 20 MiB of it garbage
		Unused:   4 * mib,
		Free:     8 * mib,
		Released: 16 * mib,
	}
	// Outside the heap: 64 - (30+4+8+16) = 6 MiB of stacks and metadata.
	if got, want := s.Used(), uint64(16*mib); got != want {
		t.Fatalf("Used = %d, want %d", got, want)
	}
	if got, want := s.Retained(), uint64(42*mib); got != want {
		t.Fatalf("Retained = %d, want %d", got, want)
	}
	if got, want := s.Mapped(), uint64(48*mib); got != want {
		t.Fatalf("Mapped = %d, want %d", got, want)
	}
}

// TestPressureFollowsGC checks that the level is refreshed after a GC cycle, with no timer.
func TestPressureFollowsGC(t *testing.T) {
	var p pressure
	used := make(chan uint64, 1)
	used <- 0
	p.init(func() int64 { return 100 * mib }, func() runtimeSample {
		u := <-used
		used <- u
		return runtimeSample{Live: u}
	}, discard())
	p.hold = 0 // this test is about sampling at GC ends, not holding a level
	p.start()
	defer p.stop()
	if got := p.level(); got != None {
		t.Fatalf("level = %s, want none", got)
	}

	<-used
	used <- 95 * mib
	testenv.WaitFor(t, "a GC to refresh the level", func() bool {
		runtime.GC()
		return p.level() == Hard
	})
	<-used
	used <- 10 * mib
	testenv.WaitFor(t, "the level to fall", func() bool {
		runtime.GC()
		return p.level() == None
	})
}

func TestReadGCPercent(t *testing.T) {
	_, gogc := keepGCSettings(t)
	debug.SetGCPercent(-1)
	if got := readGCPercent(); got != -1 {
		t.Errorf("readGCPercent with GOGC=off = %d, want -1", got)
	}
	debug.SetGCPercent(250)
	if got := readGCPercent(); got != 250 {
		t.Errorf("readGCPercent = %d, want 250", got)
	}
	debug.SetGCPercent(gogc)
}

// TestPressureHoldsDown: a level rises at once, and falls only once it has been held for
// holdDown, so that Used swinging across a threshold does not flip admission.
func TestPressureHoldsDown(t *testing.T) {
	var p pressure
	var used atomic.Uint64
	p.init(func() int64 { return 100 * mib }, func() runtimeSample { return runtimeSample{Live: used.Load()} }, discard())
	clock := time.Unix(1000, 0)
	p.now = func() time.Time { return clock }
	p.every = time.Hour // no recheck in this test
	defer p.stop()
	step := func(d time.Duration, u uint64, want Level) {
		t.Helper()
		clock = clock.Add(d)
		used.Store(u)
		p.refresh()
		if got := p.level(); got != want {
			t.Fatalf("at +%v with %d MiB used: %s, want %s", d, u/mib, got, want)
		}
	}
	step(0, 85*mib, Soft)
	step(0, 95*mib, Hard) // a rise is never held
	step(500*time.Millisecond, 10*mib, Hard)
	step(400*time.Millisecond, 10*mib, Hard)
	step(200*time.Millisecond, 10*mib, None) // 1.1 s after the last rise
	step(0, 85*mib, Soft)
	step(999*time.Millisecond, 10*mib, Soft)
}

// TestPressureRecheck: while the level is above none and no GC samples it, a GC is forced
// every recheck, so that a broker whose load fell without allocating leaves the level.
func TestPressureRecheck(t *testing.T) {
	var p pressure
	var used atomic.Uint64
	var gcs atomic.Int32
	p.init(func() int64 { return 100 * mib }, func() runtimeSample { return runtimeSample{Live: used.Load()} }, discard())
	p.gc = func() { gcs.Add(1) }
	p.hold, p.every = 0, 5*time.Millisecond
	defer p.stop()
	used.Store(85 * mib)
	p.refresh()
	if got := p.level(); got != Soft {
		t.Fatalf("level %s, want soft", got)
	}
	used.Store(10 * mib) // no GC follows: only the recheck can notice
	testenv.WaitFor(t, "the recheck to lower the level", func() bool { return p.level() == None })
	if gcs.Load() == 0 {
		t.Fatal("the level fell without a GC being forced")
	}
}
