package memory

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// Samples a check may see, for a broker whose live heap is ~8 MiB (goal 16 MiB).
var (
	// calm: the runtime holds about its goal, RSS near the edge target.
	calm = releaseSample{RSS: 20 * mib, Retained: 17 * mib, Goal: 16 * mib}
	// spike: a burst left the runtime holding 48 MiB for a 16 MiB goal.
	spike = releaseSample{RSS: 56 * mib, Retained: 48 * mib, Goal: 16 * mib}
	// busy: RSS high, but the heap is in use (a large live heap, no slack).
	busy = releaseSample{RSS: 200 * mib, Retained: 180 * mib, Goal: 170 * mib}
	// smallSpike: slack of 1.5 MiB on a tiny heap: not worth a GC.
	smallSpike = releaseSample{RSS: 20 * mib, Retained: 7 * mib / 2, Goal: 2 * mib}
	// lowRSS: a spike in proportion, but RSS is below the target anyway.
	lowRSS = releaseSample{RSS: 12 * mib, Retained: 9 * mib, Goal: 4 * mib}
)

func TestReleaserCheck(t *testing.T) {
	const interval = 30 * time.Second
	rule := newReleaseRule(42*mib, interval) // an edge device of 170 MiB: target 16 MiB
	tests := []struct {
		name    string
		samples []releaseSample
		want    []int // 1-based checks that release
	}{
		{"spike then calm: once", []releaseSample{calm, spike, spike, calm, calm, calm}, []int{3}},
		{"steady high without slack: never", slices.Repeat([]releaseSample{busy}, 20), nil},
		{"steady calm: never", slices.Repeat([]releaseSample{calm}, 20), nil},
		{"spike for one check only: never", []releaseSample{spike, calm, spike, calm, spike, calm}, nil},
		{"streak broken then held", []releaseSample{spike, busy, spike, spike}, []int{4}},
		{"slack below 2MiB: never", slices.Repeat([]releaseSample{smallSpike}, 10), nil},
		{"RSS below target: never", slices.Repeat([]releaseSample{lowRSS}, 10), nil},
		// Slack that a release does not clear (memory held where FreeOSMemory cannot
		// reach) may release again only every 2 minutes: checks 2, 6, 10, 14.
		{"persistent slack: spaced", slices.Repeat([]releaseSample{spike}, 15), []int{2, 6, 10, 14}},
		// A second spike soon after a release waits for the spacing, then releases.
		{"second spike within spacing", []releaseSample{spike, spike, calm, spike, spike, spike, spike, calm},
			[]int{2, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := releaser{rule: rule}
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			var got []int
			for i, s := range tt.samples {
				now = now.Add(interval)
				s.Allocs = uint64(i) * 64 * mib // busy: never quiet, the spike rule alone
				if r.check(now, s) {
					got = append(got, i+1)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("released at checks %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReleaserQuiet covers the quiet rule: a server whose heap holds far more than its live
// heap (GOGC 400 after a burst of connections) and that has stopped allocating is released
// after its first quiet check, and a busy one never, however much slack it holds; the pace
// that counts as quiet is the same whatever the interval.
func TestReleaserQuiet(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 5 * time.Second} {
		t.Run(interval.String(), func(t *testing.T) { testReleaserQuiet(t, interval) })
	}
}

func testReleaserQuiet(t *testing.T, interval time.Duration) {
	rule := newReleaseRule(12<<30, interval) // a server: the spike target is 3 GiB, out of reach
	// per is the bytes allocated between two checks at a rate per second.
	per := func(bytes float64) uint64 { return uint64(bytes * interval.Seconds()) }
	// After 19,000 connections: 20 MiB live, 80 MiB held, RSS 110 MiB.
	burst := releaseSample{RSS: 110 * mib, Retained: 80 * mib, Live: 20 * mib, Goal: 100 * mib}
	// After the release: the heap holds about the live heap.
	trimmed := releaseSample{RSS: 45 * mib, Retained: 22 * mib, Live: 20 * mib, Goal: 100 * mib}
	// A small broker: RSS under the floor.
	small := releaseSample{RSS: 12 * mib, Retained: 8 * mib, Live: 1 * mib, Goal: 5 * mib}
	spacing := int(releaseSpacing / interval) // checks between two releases
	tests := []struct {
		name    string
		samples []releaseSample
		perTick uint64 // bytes allocated between two checks
		want    []int
	}{
		// The first check has no previous one to measure a pace against.
		{"quiet after a burst: once", []releaseSample{burst, burst, burst, trimmed, trimmed, trimmed}, 0, []int{2}},
		// 60 MiB of slack, 100 KiB/s: 10 minutes to use it again.
		{"light traffic is quiet", []releaseSample{burst, burst, trimmed}, per(100 << 10), []int{2}},
		// 2 MiB/s: used again in 30 s, under the 40 s horizon.
		{"busy: never", slices.Repeat([]releaseSample{burst}, 20), per(2 * mib), nil},
		{"slack under a quarter of live: never", slices.Repeat([]releaseSample{{RSS: 200 * mib,
			Retained: 110 * mib, Live: 100 * mib, Goal: 500 * mib}}, 10), 0, nil},
		{"RSS under the floor: never", slices.Repeat([]releaseSample{small}, 10), 0, nil},
		// Slack a release cannot clear is released again only after the spacing (2 min).
		{"persistent slack: spaced", slices.Repeat([]releaseSample{burst}, 2*spacing+3), 0,
			[]int{2, 2 + spacing, 2 + 2*spacing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := releaser{rule: rule}
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			var got []int
			for i, s := range tt.samples {
				now = now.Add(interval)
				s.Allocs = uint64(i) * tt.perTick
				if r.check(now, s) {
					got = append(got, i+1)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("released at checks %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewReleaseRule(t *testing.T) {
	tests := []struct {
		limit  int64
		target uint64
	}{
		{0, 16 * mib},
		{42 * mib, 16 * mib},
		{256 * mib, 64 * mib},
	}
	for _, tt := range tests {
		if got := newReleaseRule(tt.limit, time.Second).Target; got != tt.target {
			t.Errorf("newReleaseRule(%d).Target = %d, want %d", tt.limit, got, tt.target)
		}
	}
}

// fakeProcess is the outside world of a Policy whose memory the test scripts: free turns a
// spike into calm, as debug.FreeOSMemory would.
type fakeProcess struct {
	mu     sync.Mutex
	now    releaseSample
	frees  int
	allocs uint64 // cumulative; every read sees 64 MiB more: a busy device, never quiet
}

func (f *fakeProcess) set(s releaseSample) {
	f.mu.Lock()
	f.now = s
	f.mu.Unlock()
}

func (f *fakeProcess) freed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frees
}

func (f *fakeProcess) system() system {
	return system{
		getenv: func(string) string { return "" },
		read: func() runtimeSample {
			f.mu.Lock()
			defer f.mu.Unlock()
			// Retained split as objects only; nothing outside the heap.
			f.allocs += 64 * mib
			return runtimeSample{Goal: f.now.Goal, Live: f.now.Goal / 2, Objects: f.now.Retained,
				Total: f.now.Retained, Allocs: f.allocs}
		},
		rss: func() (uint64, bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.now.RSS, true
		},
		free: func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.frees++
			f.now = calm
		},
		setMemoryLimit: func(l int64) int64 { return max(l, 42*mib) },
		setGCPercent:   func(int) int { return 100 },
	}
}

// loopPolicy returns a Policy with the return-to-OS loop's state only: it touches neither
// the runtime's settings nor the GC hook.
func loopPolicy(sys system, interval time.Duration) *Policy {
	p := &Policy{
		log:      slog.New(slog.DiscardHandler),
		sys:      sys,
		profile:  conf.ProfileEdge,
		interval: interval,
		reset:    make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	p.limit.Store(42 * mib)
	p.press.init(p.limit.Load, sys.read, p.log)
	return p
}

// goIn returns a GoFunc that starts goroutines with ctx, and counts them.
func goIn(ctx context.Context, started *int) GoFunc {
	return func(_ string, f func(context.Context)) bool {
		*started++
		go f(ctx)
		return true
	}
}

func TestReturnLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		proc := &fakeProcess{now: calm}
		p := loopPolicy(proc.system(), 30*time.Second)
		started := 0
		p.Start(goIn(ctx, &started))

		// advance moves the fake clock by d and lets the loop run its checks.
		advance := func(d time.Duration) {
			time.Sleep(d)
			synctest.Wait()
		}
		advance(5 * time.Second) // checks land at 30s, 60s, ... ; look 5s after each

		advance(60 * time.Second) // checks at 30s, 60s: calm
		if n := proc.freed(); n != 0 {
			t.Fatalf("released %d times while calm", n)
		}
		proc.set(spike)
		advance(30 * time.Second) // 90s: first check of the spike
		if n := proc.freed(); n != 0 {
			t.Fatalf("released after one check of a spike")
		}
		advance(30 * time.Second) // 120s: second check: release
		if n := proc.freed(); n != 1 {
			t.Fatalf("released %d times after two checks of a spike, want 1", n)
		}
		if got, want := p.retBytes.Load(), uint64(spike.RSS-calm.RSS); got != want {
			t.Fatalf("returned bytes = %d, want %d", got, want)
		}
		// A new spike right after the release waits out the spacing: 2 minutes after 120s.
		proc.set(spike)
		advance(90 * time.Second) // checks at 150s, 180s, 210s
		if n := proc.freed(); n != 1 {
			t.Fatalf("released %d times within the spacing, want 1", n)
		}
		advance(30 * time.Second) // 240s
		if n := proc.freed(); n != 2 {
			t.Fatalf("released %d times after the spacing, want 2", n)
		}
		advance(5 * time.Minute) // calm after the release: nothing more
		if got := p.returned.Load(); got != 2 {
			t.Fatalf("returned counter = %d, want 2", got)
		}

		// A reload to 0 stops the loop; to 10s starts it again.
		if err := p.Reload(conf.Memory{Limit: 42 * mib, ReturnToOS: new(conf.Duration(0))}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p.loopRunning() {
			t.Fatal("loop still running after return_to_os: 0")
		}
		proc.set(spike)
		advance(10 * time.Minute)
		if n := proc.freed(); n != 2 {
			t.Fatalf("released %d times while off, want 2", n)
		}
		if err := p.Reload(conf.Memory{Limit: 42 * mib, ReturnToOS: new(conf.Duration(10 * time.Second))}); err != nil {
			t.Fatal(err)
		}
		if started != 2 {
			t.Fatalf("loop started %d times, want 2", started)
		}
		advance(25 * time.Second) // checks at 10s and 20s: release
		if n := proc.freed(); n != 3 {
			t.Fatalf("released %d times after restart, want 3", n)
		}

		cancel()
		synctest.Wait()
		if p.loopRunning() {
			t.Fatal("loop still running after its context ended")
		}
	})
}

// TestReturnLoopClose checks that Close ends the loop.
func TestReturnLoopClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		proc := &fakeProcess{now: calm}
		p := loopPolicy(proc.system(), time.Second)
		started := 0
		p.Start(goIn(t.Context(), &started))
		time.Sleep(10 * time.Second)
		p.Close()
		synctest.Wait() // the bubble ends only if the loop has returned
		if started != 1 {
			t.Fatalf("loop started %d times, want 1", started)
		}
	})
}

func (p *Policy) loopRunning() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// TestReturnLoopStaleSample: after a spike an idle process runs no GC, so the runtime's
// live heap and goal stay the spike's and no rule sees the memory free; the loop forces a
// GC to refresh them when RSS is above the target and none ran since its last check, and
// releases within two checks.
func TestReturnLoopStaleSample(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var mu sync.Mutex
		goal, cycles, frees := uint64(40*mib), uint64(0), 0 // the goal the spike left
		sys := system{
			getenv: func(string) string { return "" },
			read: func() runtimeSample {
				mu.Lock()
				defer mu.Unlock()
				return runtimeSample{Goal: goal, Live: goal / 2, Objects: 48 * mib, Total: 48 * mib, Cycles: cycles}
			},
			rss:  func() (uint64, bool) { return 56 * mib, true },
			free: func() { mu.Lock(); frees++; mu.Unlock() },
			gc: func() { // the spike's memory is garbage: a GC finds the live heap small
				mu.Lock()
				goal, cycles = 16*mib, cycles+1
				mu.Unlock()
			},
			setMemoryLimit: func(l int64) int64 { return max(l, 42*mib) },
			setGCPercent:   func(int) int { return 100 },
		}
		p := loopPolicy(sys, 30*time.Second)
		started := 0
		p.Start(goIn(ctx, &started))
		time.Sleep(65 * time.Second) // checks at 30s and 60s
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if cycles == 0 {
			t.Fatal("no GC forced although the sample was stale")
		}
		if frees != 1 {
			t.Fatalf("released %d times in two checks after a spike, want 1", frees)
		}
	})
}

// TestEdgeRelease: on the edge profile each check that finds RSS above twice the least it
// has seen (8 MiB at least) frees the heap (two cycles) and releases the code pages; the
// server profile never releases code pages.
func TestEdgeRelease(t *testing.T) {
	for _, profile := range []string{conf.ProfileEdge, conf.ProfileServer} {
		t.Run(profile, func(t *testing.T) {
			var mu sync.Mutex
			rss, frees, codes := uint64(5*mib), 0, 0
			sys := system{
				getenv: func(string) string { return "" },
				read: func() runtimeSample {
					return runtimeSample{Goal: 4 * mib, Live: 2 * mib, Objects: 3 * mib, Total: 3 * mib}
				},
				rss: func() (uint64, bool) {
					mu.Lock()
					defer mu.Unlock()
					return rss, true
				},
				free: func() { mu.Lock(); frees++; mu.Unlock() },
				code: func() { mu.Lock(); codes++; rss -= 3 * mib; mu.Unlock() },
			}
			p := loopPolicy(sys, 30*time.Second)
			p.profile = profile
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			check := func(set uint64) {
				mu.Lock()
				rss = set
				mu.Unlock()
				now = now.Add(30 * time.Second)
				p.checkReturn(now)
			}
			check(5 * mib)  // the least seen
			check(9 * mib)  // under twice the least: nothing
			check(15 * mib) // a spike: released
			check(11 * mib) // still above: released again
			check(6 * mib)  // back: nothing
			want := 2
			if profile != conf.ProfileEdge {
				want = 0
			}
			if codes != want || frees != 2*want {
				t.Fatalf("code releases %d, frees %d; want %d and %d", codes, frees, want, 2*want)
			}
		})
	}
}
