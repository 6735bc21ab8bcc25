package store

import (
	"bufio"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// The crash test's child reads these.
const (
	crashDirEnv  = "BIFROST_STORE_CRASH_DIR"
	crashBaseEnv = "BIFROST_STORE_CRASH_BASE"
	crashEngEnv  = "BIFROST_STORE_CRASH_ENGINE"
)

// TestCrash kills a committing process at a random moment, 20 times over the same
// directory, and checks after each kill that every commit the child reported done is
// there: under always, an acknowledged message survives kill -9.
func TestCrash(t *testing.T) { forEngines(t, testCrash) }

func testCrash(t *testing.T, engine string) {
	if testing.Short() {
		t.Skip("starts 20 processes")
	}
	cfg := testConfig("", conf.SyncAlways)
	cfg.Engine = engine
	dir := t.TempDir()
	acked := map[uint64]bool{}
	for cycle := range 20 {
		base := uint64(cycle+1) << 32
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashBaseEnv+"="+strconv.FormatUint(base, 10),
			crashEngEnv+"="+engine)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random number of acknowledgements: anywhere from the first
		// commits to a few hundred groups in.
		killAt := 1 + rand.IntN(1000)
		n := 0
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			id, err := strconv.ParseUint(sc.Text(), 10, 64)
			if err != nil {
				continue // the test framework's own output
			}
			acked[id] = true
			if n++; n == killAt {
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Lines written before the kill are still read above, to EOF.
		_ = cmd.Wait()
		if n < killAt {
			t.Fatalf("cycle %d: the child exited after %d acknowledgements, before the kill", cycle, n)
		}

		cfg.Dir = dir
		s, err := openHooked(cfg, testLogger(t), nil)
		if err != nil {
			t.Fatalf("cycle %d: reopen after kill: %v", cycle, err)
		}
		got := load(t, s)
		if got.err != nil {
			t.Fatal(got.err)
		}
		missing := 0
		for id := range acked {
			m, ok := got.messages[id]
			q, qok := got.queued[fmt.Sprintf("crash/%d", id)]
			if !ok || !qok || q.MessageID != id || string(m.Topic) != fmt.Sprint("crash/", id) {
				missing++
			}
		}
		if missing > 0 {
			t.Fatalf("cycle %d: %d of %d acknowledged commits missing after kill -9", cycle, missing, len(acked))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: killed after %d acknowledgements; all %d so far present", cycle, n, len(acked))
	}
}

// TestCrashChild is TestCrash's child: it commits numbered records from 8 goroutines,
// each with up to 4 commits in flight, and prints each number once its commit is done,
// until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	base, _ := strconv.ParseUint(os.Getenv(crashBaseEnv), 10, 64)
	cfg := testConfig(dir, conf.SyncAlways)
	cfg.Engine = os.Getenv(crashEngEnv)
	s, err := openHooked(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.PutSession(SessionRecord{ClientID: "crash", Version: 5, Expiry: NeverExpire})
	commit(t, s, &b)

	var next atomic.Uint64
	next.Store(base)
	var out sync.Mutex
	deadline := time.Now().Add(30 * time.Second) // a child that is never killed ends
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			slots := make(chan *Batch, 4)
			for range cap(slots) {
				slots <- new(Batch)
			}
			for time.Now().Before(deadline) {
				b := <-slots
				id := next.Add(1)
				b.Reset()
				b.PutMessage(id, MessageRecord{Topic: fmt.Append(nil, "crash/", id), Payload: make([]byte, 200), QoS: 1})
				b.PutQueued("crash", id, QueuedRecord{MessageID: id, QoS: 1})
				s.Commit(b, func(err error) {
					if err != nil {
						fmt.Fprintln(os.Stderr, "commit:", err)
						os.Exit(2)
					}
					out.Lock()
					os.Stdout.WriteString(strconv.FormatUint(id, 10) + "\n")
					out.Unlock()
					slots <- b
				})
			}
		})
	}
	wg.Wait()
	s.Close()
}
