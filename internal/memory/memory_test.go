package memory

import (
	"bytes"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/bifrost-mqtt/bifrost/conf"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// syncBuffer is a log sink the GC hook may write to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// keepGCSettings restores the process's memory limit and GC percent when the test ends,
// whatever the test or the code under test did, and clears GOGC and GOMEMLIMIT so that
// Apply treats the config as governing (the runtime read them at start already).
func keepGCSettings(t *testing.T) (limit int64, gogc int) {
	t.Helper()
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	limit = debug.SetMemoryLimit(-1)
	gogc = debug.SetGCPercent(100)
	debug.SetGCPercent(gogc)
	t.Cleanup(func() {
		debug.SetMemoryLimit(limit)
		debug.SetGCPercent(gogc)
	})
	return limit, gogc
}

// fixtureSystem is the host system with its files read from fsys.
func fixtureSystem(fsys fs.FS) system {
	sys := hostSystem()
	sys.fsys = fsys
	sys.rss = func() (uint64, bool) { return readRSS(fsys) }
	return sys
}

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		cfg     conf.Memory
		fixture string
		limit   int64
		gogc    int
	}{
		{"server in a 512MiB cgroup", conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto}, "cgroup-v2", 429496729, 400},
		{"server in a v1 256MiB cgroup", conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto}, "cgroup-v1", 214748364, 400},
		{"edge in a v1 32MiB cgroup", conf.Memory{Profile: conf.ProfileEdge, Limit: conf.ByteSizeAuto}, "cgroup-v1-32mib", 26843545, 50},
		{"edge in a v2 512MiB cgroup", conf.Memory{Profile: conf.ProfileEdge, Limit: conf.ByteSizeAuto}, "cgroup-v2", 64 * mib, 50},
		{"edge on a 170MiB device", conf.Memory{Profile: conf.ProfileEdge, Limit: conf.ByteSizeAuto}, "no-cgroup", 44564480, 50},
		{"server with a size", conf.Memory{Profile: conf.ProfileServer, Limit: 300 * mib}, "no-cgroup", 300 * mib, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prevLimit, prevGOGC := keepGCSettings(t)
			p, err := apply(tt.cfg, discard(), fixtureSystem(fixture(tt.fixture)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if got := debug.SetMemoryLimit(-1); got != tt.limit {
				t.Errorf("runtime memory limit = %d, want %d", got, tt.limit)
			}
			if got := p.Limit(); got != tt.limit {
				t.Errorf("Limit = %d, want %d", got, tt.limit)
			}
			if got := readGCPercent(); got != tt.gogc {
				t.Errorf("runtime GC percent = %d, want %d", got, tt.gogc)
			}
			if got := p.GCPercent(); got != tt.gogc {
				t.Errorf("GCPercent = %d, want %d", got, tt.gogc)
			}

			p.Close()
			if got := debug.SetMemoryLimit(-1); got != prevLimit {
				t.Errorf("after Close, memory limit = %d, want %d", got, prevLimit)
			}
			if got := readGCPercent(); got != prevGOGC {
				t.Errorf("after Close, GC percent = %d, want %d", got, prevGOGC)
			}
		})
	}
}

// TestApplyPublic goes through Apply and the real file system with a configured size, the
// one case whose outcome does not depend on the machine.
func TestApplyPublic(t *testing.T) {
	keepGCSettings(t)
	p, err := Apply(conf.Memory{Profile: conf.ProfileServer, Limit: 200 * mib}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if got := debug.SetMemoryLimit(-1); got != 200*mib {
		t.Fatalf("runtime memory limit = %d, want %d", got, 200*mib)
	}
	if p.Pressure() != None {
		t.Fatalf("a test process is under %s pressure at 200MiB", p.Pressure())
	}
}

func TestApplyEnvironmentOverrides(t *testing.T) {
	prevLimit, prevGOGC := keepGCSettings(t)
	// The runtime applied these at start; setting them now only tells Apply they govern.
	t.Setenv("GOMEMLIMIT", "123MiB")
	t.Setenv("GOGC", "50")
	var logs syncBuffer
	p, err := apply(conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto},
		slog.New(slog.NewTextHandler(&logs, nil)), fixtureSystem(fixture("cgroup-v2")))
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != prevLimit {
		t.Errorf("memory limit = %d, want the environment's %d", got, prevLimit)
	}
	if got := readGCPercent(); got != prevGOGC {
		t.Errorf("GC percent = %d, want the environment's %d", got, prevGOGC)
	}
	want := prevLimit
	if want == math.MaxInt64 {
		want = 0 // no limit
	}
	if got := p.Limit(); got != want {
		t.Errorf("Limit = %d, want %d", got, want)
	}
	for _, want := range []string{"GOMEMLIMIT from the environment overrides", "GOGC from the environment overrides"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	p.Close()
	if got := debug.SetMemoryLimit(-1); got != prevLimit {
		t.Errorf("after Close, memory limit = %d, want %d", got, prevLimit)
	}
}

func TestApplyNoLimit(t *testing.T) {
	prevLimit, _ := keepGCSettings(t)
	var logs syncBuffer
	p, err := apply(conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto},
		slog.New(slog.NewTextHandler(&logs, nil)), fixtureSystem(fstest.MapFS{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if got := debug.SetMemoryLimit(-1); got != prevLimit {
		t.Errorf("memory limit = %d, want the one before Apply, %d", got, prevLimit)
	}
	// Without a cap, GOGC is not raised.
	if got := readGCPercent(); got != noLimitGCPercent {
		t.Errorf("GC percent = %d, want %d", got, noLimitGCPercent)
	}
	if !strings.Contains(logs.String(), "no memory limit") {
		t.Errorf("no warning logged:\n%s", logs.String())
	}
}

func TestApplyResolveError(t *testing.T) {
	keepGCSettings(t)
	_, err := apply(conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto}, discard(),
		fixtureSystem(fstest.MapFS{"proc/meminfo": {Data: []byte("nonsense")}}))
	if err == nil || !strings.Contains(err.Error(), "set memory.limit") {
		t.Fatalf("err = %v, want one telling to set memory.limit", err)
	}
}

func TestReload(t *testing.T) {
	keepGCSettings(t)
	sys := fixtureSystem(fixture("cgroup-v2"))
	p, err := apply(conf.Memory{Profile: conf.ProfileServer, Limit: 300 * mib}, discard(), sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Reload(conf.Memory{Profile: conf.ProfileServer, Limit: conf.ByteSizeAuto}); err != nil {
		t.Fatal(err)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(429496729); got != want {
		t.Fatalf("after reload to auto, memory limit = %d, want %d", got, want)
	}
	if got := p.Resolved().From.Source; got != SourceCgroupV2 {
		t.Fatalf("Resolved source = %s, want cgroup-v2", got)
	}
	p.Close()
	if err := p.Reload(conf.Memory{Profile: conf.ProfileServer, Limit: 300 * mib}); err == nil {
		t.Fatal("Reload after Close succeeded")
	}
	if got := debug.SetMemoryLimit(-1); got == 300*mib {
		t.Fatal("Reload after Close set the limit")
	}
}

// TestPressureFromApply checks the level a Policy reports against its limit.
func TestPressureFromApply(t *testing.T) {
	keepGCSettings(t)
	var live atomic.Uint64
	live.Store(85 * mib)
	sys := fixtureSystem(fstest.MapFS{})
	sys.read = func() runtimeSample { return runtimeSample{Live: live.Load()} }
	p, err := apply(conf.Memory{Profile: conf.ProfileServer, Limit: 100 * mib}, discard(), sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if got := p.Pressure(); got != Soft {
		t.Fatalf("Pressure at 85%% = %s, want soft", got)
	}
	live.Store(95 * mib)
	p.press.refresh()
	if got := p.Pressure(); got != Hard {
		t.Fatalf("Pressure at 95%% = %s, want hard", got)
	}
}

func TestReadRSS(t *testing.T) {
	got, ok := readRSS(fixture("cgroup-v2"))
	if want := uint64(2560 * os.Getpagesize()); !ok || got != want {
		t.Fatalf("readRSS = %d, %t, want %d", got, ok, want)
	}
	if _, ok := readRSS(fstest.MapFS{}); ok {
		t.Fatal("readRSS without /proc succeeded")
	}
}
