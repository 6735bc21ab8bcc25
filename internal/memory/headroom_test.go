package memory

import (
	"context"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

func TestTunedGCPercent(t *testing.T) {
	tests := []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, 400},           // nothing measured yet: the base
		{2 * mib, 64 * mib, 3200},    // a small heap: 64 MiB over 2 MiB
		{16 * mib, 64 * mib, 400},    // 4x live is the headroom: the base
		{1 << 30, 64 * mib, 400},     // a big heap keeps the base
		{100 << 10, 64 * mib, 10000}, // a near-empty heap: capped
		{3 * mib, 10 * mib, 400},     // a small limit's headroom
		{64*mib + 1, 256 * mib, 400}, // rounding: 399.99..% is the base
		{mib, 64*mib + mib/2, 6450},  // rounded up: never under the headroom
	}
	for _, tt := range tests {
		if got := tunedGCPercent(400, tt.live, tt.headroom); got != tt.want {
			t.Errorf("tunedGCPercent(400, %d, %d) = %d, want %d", tt.live, tt.headroom, got, tt.want)
		}
	}
	if got, want := headroomFor(12<<30), uint64(64*mib); got != want {
		t.Errorf("headroomFor(12GiB) = %d, want %d", got, want)
	}
	if got, want := headroomFor(256*mib), uint64(32*mib); got != want {
		t.Errorf("headroomFor(256MiB) = %d, want %d", got, want)
	}
}

// fakeGC is a runtime whose live heap the test sets and whose GC percent it records.
type fakeGC struct {
	mu   sync.Mutex
	live uint64
	gogc []int
}

func (f *fakeGC) read() runtimeSample {
	f.mu.Lock()
	defer f.mu.Unlock()
	return runtimeSample{Live: f.live}
}

func (f *fakeGC) set(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gogc = append(f.gogc, p)
	return 100
}

func (f *fakeGC) setLive(v uint64) {
	f.mu.Lock()
	f.live = v
	f.mu.Unlock()
}

func (f *fakeGC) sets() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.gogc...)
}

func TestTunerAdjust(t *testing.T) {
	f := &fakeGC{}
	tu := &tuner{base: 400, headroom: 64 * mib, cur: 400, read: f.read, set: f.set}
	steps := []struct {
		live uint64
		want int // the percent in force after the cycle
	}{
		{2 * mib, 3200},
		{2*mib + mib/8, 3200}, // 3012%: within an eighth, not set again
		{4 * mib, 1600},
		{64 * mib, 400},
		{60 * mib, 400}, // 427%: within an eighth of 400
	}
	for i, st := range steps {
		f.setLive(st.live)
		tu.adjust()
		if got := tu.percent(); got != st.want {
			t.Fatalf("cycle %d (live %d): GOGC %d, want %d", i+1, st.live, got, st.want)
		}
	}
	if got := f.sets(); len(got) != 3 {
		t.Fatalf("GOGC set %v, want three changes", got)
	}
	tu.stop()
	f.setLive(mib)
	tu.adjust()
	if n := len(f.sets()); n != 3 {
		t.Fatal("a stopped tuner set GOGC")
	}
}

// TestPolicyTuner checks that Start starts the tuner on a server with a limit only, that
// the GC hook retunes it, and that Close stops it.
func TestPolicyTuner(t *testing.T) {
	keepGCSettings(t)
	f := &fakeGC{live: 2 * mib}
	sys := fixtureSystem(fixture("no-cgroup"))
	sys.read = f.read
	sys.setGCPercent = f.set
	noLoop := func(string, func(context.Context)) bool { return false }

	edge, err := apply(conf.Memory{Profile: conf.ProfileEdge, Limit: 64 * mib}, discard(), sys)
	if err != nil {
		t.Fatal(err)
	}
	edge.Start(noLoop)
	if edge.tune != nil {
		t.Fatal("the edge profile runs the headroom tuner")
	}
	edge.Close()

	p, err := apply(conf.Memory{Profile: conf.ProfileServer, Limit: 1 << 30}, discard(), sys)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.GCPercent(); got != 400 {
		t.Fatalf("GCPercent before Start = %d, want 400", got)
	}
	p.Start(noLoop)
	if got := p.GCPercent(); got != 3200 {
		t.Fatalf("GCPercent with 2 MiB live = %d, want 3200 (64 MiB of headroom)", got)
	}
	// The GC hook retunes: the live heap grew.
	f.setLive(8 * mib)
	after := p.press.after.Load()
	if after == nil {
		t.Fatal("the tuner is not on the GC hook")
	}
	(*after)()
	if got := p.GCPercent(); got != 800 {
		t.Fatalf("GCPercent with 8 MiB live = %d, want 800", got)
	}
	p.Close()
	if p.tune != nil || p.press.after.Load() != nil {
		t.Fatal("Close left the tuner running")
	}
}
