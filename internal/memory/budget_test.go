package memory

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// budgetPressure returns a pressure over a 100 MiB limit with used MiB at every sample,
// and b attached to it; its GC waits for a value on gcs and then takes it as used.
func budgetPressure(t *testing.T, used *atomic.Uint64, b *Budget) (p *pressure, gcs chan uint64) {
	t.Helper()
	p = new(pressure)
	p.init(func() int64 { return 100 * mib }, func() runtimeSample { return runtimeSample{Live: used.Load()} }, discard())
	clock := time.Unix(1000, 0)
	p.now = func() time.Time { return clock }
	p.every = time.Hour // no recheck in this test
	gcs = make(chan uint64)
	p.gc = func() { used.Store(<-gcs) }
	p.refresh()
	p.attach(b)
	t.Cleanup(func() {
		p.stop()
		close(gcs)
	})
	return p, gcs
}

// TestBudgetRaises: bytes taken in since the last sample raise the level at once once
// they would take it past the next threshold, before any GC samples, and a GC follows
// whose sample confirms the level (then held) or undoes it (then at once).
func TestBudgetRaises(t *testing.T) {
	var used atomic.Uint64
	used.Store(70 * mib)
	var b Budget
	p, gcs := budgetPressure(t, &used, &b)

	b.Spend(9 * mib) // 79 of 100: under soft
	if got := p.level(); got != None {
		t.Fatalf("79 MiB: %s, want none", got)
	}
	b.Spend(2 * mib) // 81: soft on the estimate, with no sample
	if got := p.level(); got != Soft {
		t.Fatalf("81 MiB taken in since a sample of 70: %s, want soft", got)
	}
	b.Spend(9 * mib) // 90: hard
	if got := p.level(); got != Hard {
		t.Fatalf("90 MiB taken in since a sample of 70: %s, want hard", got)
	}
	if p.estimates.Load() != 2 {
		t.Fatalf("%d levels raised on the estimate, want 2", p.estimates.Load())
	}

	// The GC asked for finds the bytes live: hard stands, and is held.
	gcs <- 91 * mib
	testenv.WaitFor(t, "the GC's sample", func() bool { return p.samples.Load() >= 2 && !p.collecting.Load() })
	if got := p.level(); got != Hard {
		t.Fatalf("sampled at 91 MiB: %s, want hard", got)
	}
	used.Store(10 * mib)
	p.refresh()
	if got := p.level(); got != Hard {
		t.Fatalf("a confirmed hard fell within its hold: %s", got)
	}
}

// TestBudgetUndone: a level raised on the estimate whose GC finds the bytes gone (they
// were delivered and freed) falls back at once to what the samples gave.
func TestBudgetUndone(t *testing.T) {
	var used atomic.Uint64
	used.Store(85 * mib)
	var b Budget
	p, gcs := budgetPressure(t, &used, &b)
	if got := p.level(); got != Soft {
		t.Fatalf("85 MiB: %s, want soft", got)
	}
	b.Spend(4 * mib)
	if got := p.level(); got != Soft {
		t.Fatalf("89 MiB: %s, want soft", got)
	}
	b.Spend(1 * mib)
	if got := p.level(); got != Hard {
		t.Fatalf("90 MiB: %s, want hard", got)
	}
	samples := p.samples.Load()
	gcs <- 80 * mib // the sample says soft: hard is undone at once, soft is still held
	testenv.WaitFor(t, "the GC's sample", func() bool { return p.samples.Load() > samples && !p.collecting.Load() })
	if got := p.level(); got != Soft {
		t.Fatalf("hard on the estimate, sampled at 80 MiB: %s, want soft", got)
	}
	// The budget starts over from the sample: 10 MiB to hard.
	b.Spend(9 * mib)
	if got := p.level(); got != Soft {
		t.Fatalf("89 MiB: %s, want soft", got)
	}
	b.Spend(1 * mib)
	if got := p.level(); got != Hard {
		t.Fatalf("90 MiB: %s, want hard", got)
	}
	// Sampled within hard's hysteresis band (85 to 90): hard stands, as a sampled hard
	// would; falling back to soft would resume the publishers for one more window.
	samples = p.samples.Load()
	gcs <- 86 * mib
	testenv.WaitFor(t, "the GC's sample", func() bool { return p.samples.Load() > samples && !p.collecting.Load() })
	if got := p.level(); got != Hard {
		t.Fatalf("hard on the estimate, sampled at 86 MiB: %s, want hard", got)
	}
}

// TestBudgetDetached: a budget attached to nothing, or to a stopped pressure, never
// raises a level and stops taking the slow path.
func TestBudgetDetached(t *testing.T) {
	var b Budget
	b.Spend(1)
	if b.left.Load() < unlimited/2 {
		t.Fatalf("an unattached budget left %d", b.left.Load())
	}
	var used atomic.Uint64
	used.Store(10 * mib)
	var a Budget
	p, _ := budgetPressure(t, &used, &a)
	p.stop()
	a.Spend(95 * mib)
	if got := p.level(); got != None {
		t.Fatalf("a stopped pressure: %s, want none", got)
	}
}

func TestHeadroom(t *testing.T) {
	for _, tt := range []struct {
		l           Level
		used, limit uint64
		want        int64
	}{
		{None, 70, 100, 10},
		{None, 80, 100, 0},
		{Soft, 76, 100, 14},
		{Soft, 95, 100, 0},
		{Hard, 95, 100, unlimited},
		{None, 70, 0, unlimited},
	} {
		if got := headroom(tt.l, tt.used, tt.limit); got != tt.want {
			t.Errorf("headroom(%s, %d, %d) = %d, want %d", tt.l, tt.used, tt.limit, got, tt.want)
		}
	}
}
