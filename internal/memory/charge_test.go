package memory

import (
	"os"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestMeter reads what pressure is computed from in fake trees: a cgroup's charge less its
// page cache where the limit came from that cgroup, the process's anonymous RSS otherwise.
func TestMeter(t *testing.T) {
	page := uint64(os.Getpagesize())
	auto := conf.Memory{Profile: conf.ProfileEdge, Limit: conf.ByteSizeAuto}
	tests := []struct {
		fixture     string
		cfg         conf.Memory
		envLimit    bool
		wantCharged uint64
	}{
		// v1: memory.usage_in_bytes 9060352 - total_cache 634880.
		{"cgroup-v1-32mib", auto, false, 9060352 - 634880},
		// v2: memory.current 8 MiB - file 2 MiB of system.slice, whose memory.max is the
		// limit (2 GiB), not the service's own group below it.
		{"cgroup-v2-nested", conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto}, false, 6 * mib},
		// GOMEMLIMIT governs: the process's anonymous RSS.
		{"cgroup-v1-32mib", auto, true, (3000 - 1200) * page},
		// A configured limit: the same.
		{"cgroup-v1-32mib", conf.Memory{Profile: conf.ProfileEdge, Limit: 16 * mib}, false, (3000 - 1200) * page},
		// No cgroup: the process's anonymous RSS.
		{"no-cgroup", auto, false, (2613 - 1126) * page},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			fsys := fixture(tt.fixture)
			lim, err := ResolveLimit(tt.cfg, fsys)
			if err != nil {
				t.Fatal(err)
			}
			m := newMeter(fsys, lim, tt.envLimit)
			got, ok := m.read()
			if !ok || got != tt.wantCharged {
				t.Fatalf("%s: read = %d, %v; want %d", m.what, got, ok, tt.wantCharged)
			}
		})
	}
}

// TestMeterUnreadable: a cgroup whose charge files are missing, or a statm that is not
// one, reads nothing, and pressure falls back on the runtime's figure.
func TestMeterUnreadable(t *testing.T) {
	lim := Limit{Bytes: 8 * mib, From: Available{Bytes: 10 * mib, Source: SourceCgroupV1, Path: "sys/fs/cgroup/memory/memory.limit_in_bytes"}}
	if _, ok := newMeter(fixture("no-cgroup"), lim, false).read(); ok {
		t.Fatal("read a cgroup charge from a tree without one")
	}
	if _, ok := newMeter(fixture("cgroup-v2-nested"), Limit{}, false).read(); ok {
		t.Fatal("read an RSS from a tree without statm")
	}
}

func TestPressureUsed(t *testing.T) {
	s := runtimeSample{
		Live:     3 * mib,
		Total:    20 * mib, // 7 MiB outside the heap: GC metadata, profiler buckets, stacks
		Objects:  5 * mib,  // 2 MiB garbage
		Unused:   mib,
		Free:     2 * mib,
		Released: 5 * mib,
	}
	tests := []struct {
		name    string
		charged uint64
		ok      bool
		want    uint64
	}{
		// The heap held less the live heap (8 - 3 MiB) is taken out of what is charged.
		{"charged", 9 * mib, true, 4 * mib},
		{"never below the live heap", 6 * mib, true, 3 * mib},
		{"less than the heap held", mib, true, 3 * mib},
		{"unreadable: the runtime's figure", 0, false, s.Used()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pressureUsed(s, tt.charged, tt.ok); got != tt.want {
				t.Fatalf("pressureUsed = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestPressureFromCharge is the edge broker in a 12 MiB cgroup (a limit of 9.6 MiB) after
// a surge: the runtime still maps 7 MiB outside the heap (GC metadata and the profiler's
// buckets, mostly never touched), which keeps its own figure above the level at which
// soft is left, while what the cgroup is charged has fallen. The level follows the charge
// and falls to none.
func TestPressureFromCharge(t *testing.T) {
	var p pressure
	sample := runtimeSample{Live: 3 * mib, Total: 14 * mib, Objects: 3 * mib, Unused: mib, Free: 2 * mib, Released: mib}
	p.init(func() int64 { return 10 * mib }, func() runtimeSample { return sample }, discard())
	p.hold = 0
	charged := uint64(9 * mib)
	m := meter{read: func() (uint64, bool) { return charged, true }}
	p.meter.Store(&m)
	changes := 0
	f := func() { changes++ }
	p.changed.Store(&f)

	p.refresh() // 9 - 3 MiB of heap to free = 6 MiB of 10: none
	if got := p.level(); got != None {
		t.Fatalf("at 6 of 10 MiB: %s, want none", got)
	}
	charged = 12 * mib // 9 of 10: hard
	p.refresh()
	if got := p.level(); got != Hard {
		t.Fatalf("at 9 of 10 MiB: %s, want hard", got)
	}
	charged = 10 * mib // 7 of 10, while the runtime's own figure is 13 MiB
	p.refresh()
	if got := p.level(); got != None {
		t.Fatalf("load gone (runtime figure %d MiB, charged less heap to free 7 MiB of 10): %s, want none",
			sample.Used()/mib, got)
	}
	if changes != 2 {
		t.Fatalf("changed hook ran %d times, want 2", changes)
	}
	if p.hardTime() <= 0 {
		t.Fatal("no time counted at hard")
	}
	p.stop()
}
