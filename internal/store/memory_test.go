package store

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

const (
	floorEnv       = "BIFROST_STORE_FLOOR_DIR"
	floorEngineEnv = "BIFROST_STORE_FLOOR_ENGINE"
)

// TestMemoryFloor measures, in a fresh process, what opening a store with the edge
// profile's settings adds, with each engine: RSS and goroutines, with a few records
// committed and loaded.
func TestMemoryFloor(t *testing.T) { forEngines(t, testMemoryFloor) }

func testMemoryFloor(t *testing.T, engine string) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	if testenv.Race {
		t.Skip("measures RSS: the race detector's shadow memory makes the figures meaningless")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryFloorChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), floorEnv+"="+t.TempDir(), floorEngineEnv+"="+engine)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var before, after, gBefore, gAfter int
	for line := range bytes.Lines(out) {
		if n, _ := fmt.Sscanf(string(line), "floor %d %d %d %d", &before, &after, &gBefore, &gAfter); n == 4 {
			break
		}
	}
	if after == 0 {
		t.Fatalf("no measurement in the child's output:\n%s", out)
	}
	var working, gWorking int
	for line := range bytes.Lines(out) {
		if n, _ := fmt.Sscanf(string(line), "working %d %d", &working, &gWorking); n == 2 {
			break
		}
	}
	delta := after - before
	t.Logf("edge store: RSS %d KiB before Open, %d KiB after (+%d KiB); goroutines %d -> %d",
		before, after, delta, gBefore, gAfter)
	t.Logf("after writing and loading 8 MiB: RSS %d KiB (+%d KiB); goroutines %d",
		working, working-before, gWorking)
	// Memtable and cache are 256 KiB each; the bound catches a regression (a default
	// that ignores the profile), not noise.
	const limit = 16 << 10
	if delta > limit || working-before > limit {
		t.Errorf("an edge store adds %d KiB of RSS empty, %d KiB working; want under %d KiB",
			delta, working-before, limit)
	}
}

func TestMemoryFloorChild(t *testing.T) {
	dir := os.Getenv(floorEnv)
	if dir == "" {
		t.Skip("run by TestMemoryFloor")
	}
	settle := func() int {
		runtime.GC()
		debug.FreeOSMemory()
		return rssKiB(t)
	}
	before, gBefore := settle(), runtime.NumGoroutine()
	cfg := conf.DefaultEdge().Store
	cfg.Dir, cfg.Engine = dir, os.Getenv(floorEngineEnv)
	s, err := Open(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.PutSession(SessionRecord{ClientID: "c", Version: 5})
	for i := range 100 {
		b.PutMessage(uint64(i), MessageRecord{Topic: []byte("t"), Payload: make([]byte, 100)})
		b.PutQueued("c", uint64(i), QueuedRecord{MessageID: uint64(i), QoS: 1})
	}
	commit(t, s, &b)
	if err := s.Load(newCollector()); err != nil {
		t.Fatal(err)
	}
	after, gAfter := settle(), runtime.NumGoroutine()
	fmt.Printf("floor %d %d %d %d\n", before, after, gBefore, gAfter)

	// Working: 8 MiB written (memtables fill and flush), then all of it loaded (reads
	// fill the block cache).
	payload := make([]byte, 1000)
	for i := range 8 << 10 {
		id := uint64(1000 + i)
		b.PutMessage(id, MessageRecord{Topic: []byte("t"), Payload: payload})
		b.PutQueued("c", id, QueuedRecord{MessageID: id, QoS: 1})
		if i%64 == 63 {
			commit(t, s, &b)
			b.Reset()
		}
	}
	if err := s.Load(newCollector()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("working %d %d\n", settle(), runtime.NumGoroutine())
	s.Close()
}

// rssKiB reads VmRSS from /proc/self/status.
func rssKiB(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
