package raftstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The crash test's child reads these.
const (
	crashDirEnv  = "BIFROST_RAFTSTORE_CRASH_DIR"
	crashBaseEnv = "BIFROST_RAFTSTORE_CRASH_BASE"
)

// Stable-store keys the crash test's child writes beside raft's own.
var (
	crashCounterKey = []byte("crash-counter")
	crashBlobKey    = []byte("crash-blob")
)

// crashCommand returns the 100-byte command of value v: v big-endian, then bytes that
// depend on v, so that a torn or misplaced entry shows.
func crashCommand(v uint64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 100), v)
	for len(b) < 100 {
		b = append(b, byte(v)+byte(len(b)))
	}
	return b
}

// crashBlob returns the 1 KiB stable value of counter k.
func crashBlob(k uint64) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 1024), k)
	for len(b) < 1024 {
		b = append(b, byte(k*7)+byte(len(b)))
	}
	return b
}

// indexFSM is the crash test's state machine: it keeps the index of the last command it
// applied. (raft.AppliedIndex may lag a Barrier that has returned: raft's main loop
// records it after handing the entries to the FSM goroutine, which may answer the
// Barrier first.)
type indexFSM struct{ last atomic.Uint64 }

func (f *indexFSM) Apply(l *raft.Log) any {
	f.last.Store(l.Index)
	return nil
}

func (f *indexFSM) Snapshot() (raft.FSMSnapshot, error) { return indexSnapshot(f.last.Load()), nil }

func (f *indexFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.last.Store(binary.BigEndian.Uint64(b[:]))
	return nil
}

type indexSnapshot uint64

func (s indexSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(binary.BigEndian.AppendUint64(nil, uint64(s))); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (indexSnapshot) Release() {}

// crashNode opens the store in dir/raft and starts a single raft node on it, with
// snapshots in dir, bootstrapping it when the directory holds no state.
func crashNode(dir string, slogger *slog.Logger, hlog hclog.Logger) (*Store, *raft.Raft, *indexFSM, error) {
	s, err := Open(filepath.Join(dir, "raft"), slogger)
	if err != nil {
		return nil, nil, nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
	if err != nil {
		return nil, nil, nil, errors.Join(err, s.Close())
	}
	existing, err := raft.HasExistingState(s, s, snaps)
	if err != nil {
		return nil, nil, nil, errors.Join(err, s.Close())
	}
	_, trans := raft.NewInmemTransport("n1")
	fsm := &indexFSM{}
	r, err := raft.NewRaft(raftConfig("n1", hlog), fsm, s, s, snaps, trans)
	if err != nil {
		return nil, nil, nil, errors.Join(err, s.Close())
	}
	if !existing {
		cfg := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: "n1"}}}
		if err := r.BootstrapCluster(cfg).Error(); err != nil {
			return nil, nil, nil, errors.Join(err, r.Shutdown().Error(), s.Close())
		}
	}
	return s, r, fsm, nil
}

// crashReady waits, up to a bound, for r to lead and to have applied its log.
func crashReady(r *raft.Raft) error {
	deadline := time.Now().Add(20 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			return errors.New("no leadership in 20s")
		}
		time.Sleep(time.Millisecond)
	}
	return r.Barrier(20 * time.Second).Error()
}

// crashAcks is what the children of a crash test acknowledged, as the parent reads it.
type crashAcks struct {
	logs     map[uint64]uint64 // index → value of each acknowledged command
	maxIndex uint64            // the highest acknowledged index
	term     uint64            // the highest term a child led in
	counter  uint64            // the highest acknowledged stable counter
}

// TestCrash kills a process running hashicorp/raft on the Store at random moments, 20
// times over the same directory, and after each kill checks the store: every entry
// raft acknowledged (its Apply returned) is in the log and intact, or below the log's
// first index and covered by a snapshot; the log is contiguous from FirstIndex to
// LastIndex; raft's current term is at least the last term a child led in; every
// acknowledged stable value is there, intact. Each child starts raft on what the last
// one left and reports the index it has applied after a Barrier, which must cover every
// acknowledged entry; after the last kill the test starts raft itself to check the same.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 20 processes")
	}
	dir := t.TempDir()
	acks := &crashAcks{logs: map[uint64]uint64{}}
	kills := map[string]int{}
	for round := range 20 {
		how := crashRound(t, dir, round, acks)
		kills[how]++
		checkCrashed(t, dir, round, acks)
	}
	t.Logf("kills: %v; %d entries acknowledged up to index %d, stable counter %d, term %d",
		kills, len(acks.logs), acks.maxIndex, acks.counter, acks.term)

	s, r, fsm, err := crashNode(dir, testLogger(t), newRaftLog(t))
	if err != nil {
		t.Fatalf("raft on the store after the last kill: %v", err)
	}
	defer func() {
		if err := errors.Join(r.Shutdown().Error(), s.Close()); err != nil {
			t.Error(err)
		}
	}()
	if err := crashReady(r); err != nil {
		t.Fatalf("raft on the store after the last kill: %v", err)
	}
	if got := fsm.last.Load(); got < acks.maxIndex {
		t.Fatalf("raft restarted after the last kill applied up to %d, acknowledged %d", got, acks.maxIndex)
	}
}

// crashRound runs one child on dir and kills it: in round 0 (which bootstraps) and
// every odd round after a random number of acknowledgements, in the other even rounds
// after a random delay from its start, which may fall in its recovery or raft's
// start-up. It adds what the child acknowledged to acks and returns how it killed it.
func crashRound(t *testing.T, dir string, round int, acks *crashAcks) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir,
		crashBaseEnv+"="+strconv.FormatUint(uint64(round+1)<<32, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var killed atomic.Bool
	kill := func() {
		if killed.CompareAndSwap(false, true) {
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	// A child that stops acknowledging is killed too, and the round fails below.
	watchdog := time.AfterFunc(60*time.Second, kill)
	defer watchdog.Stop()

	how, killAt := "acks", -1
	if round%2 == 0 && round > 0 {
		delay := time.Duration(rand.IntN(200)) * time.Millisecond
		how = "delay"
		time.AfterFunc(delay, kill)
	} else {
		killAt = 1 + rand.IntN(600)
	}
	n, ready := 0, false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue // the test framework's own output
		}
		a, errA := strconv.ParseUint(f[1], 10, 64)
		b, errB := strconv.ParseUint(f[2], 10, 64)
		if errA != nil || errB != nil {
			continue
		}
		switch f[0] {
		case "ready": // the last command applied, term
			ready = true
			if a < acks.maxIndex {
				kill()
				t.Fatalf("round %d: raft restarted on the store applied up to %d, acknowledged %d", round, a, acks.maxIndex)
			}
			acks.term = max(acks.term, b)
		case "log": // index, value
			acks.logs[a] = b
			acks.maxIndex = max(acks.maxIndex, a)
			n++
		case "stable": // counter, unused
			acks.counter = max(acks.counter, a)
			n++
		default:
			continue
		}
		if n == killAt {
			kill()
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || !killed.Load() {
		t.Fatalf("round %d: the child ended by itself (%v) after %d acknowledgements:\n%s", round, err, n, stderr.String())
	}
	if !watchdog.Stop() {
		t.Fatalf("round %d: the child stopped acknowledging (%d so far, ready %v):\n%s", round, n, ready, stderr.String())
	}
	t.Logf("round %d: killed (%s) after %d acknowledgements, ready %v", round, how, n, ready)
	return how
}

// checkCrashed opens the store a child was killed on and checks it against acks.
func checkCrashed(t *testing.T, dir string, round int, acks *crashAcks) {
	t.Helper()
	s, err := Open(filepath.Join(dir, "raft"), testLogger(t))
	if err != nil {
		t.Fatalf("round %d: reopen after kill: %v", round, err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first == 0 || last < acks.maxIndex {
		t.Fatalf("round %d: log %d..%d, acknowledged up to %d", round, first, last, acks.maxIndex)
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("round %d: log %d..%d: GetLog(%d): %v", round, first, last, i, err)
		}
		if v, ok := acks.logs[i]; ok && (l.Type != raft.LogCommand || !bytes.Equal(l.Data, crashCommand(v))) {
			t.Fatalf("round %d: entry %d: type %v, data %x, acknowledged command %d", round, i, l.Type, l.Data, v)
		}
	}
	// raft compacts only what a snapshot holds: the newest covers what is below first.
	var below uint64
	for i := range acks.logs {
		if i < first {
			below = max(below, i)
		}
	}
	if below > 0 {
		snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		list, err := snaps.List()
		if err != nil || len(list) == 0 || list[0].Index < below {
			t.Fatalf("round %d: entry %d acknowledged, log from %d, snapshots %v (%v)", round, below, first, list, err)
		}
	}
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term < acks.term {
		t.Fatalf("round %d: CurrentTerm %d (%v), a child led in term %d", round, term, err, acks.term)
	}
	counter, err := s.GetUint64(crashCounterKey)
	if err != nil || counter < acks.counter {
		t.Fatalf("round %d: stable counter %d (%v), acknowledged %d", round, counter, err, acks.counter)
	}
	blob, err := s.Get(crashBlobKey)
	if err != nil || len(blob) < 8 && acks.counter > 0 {
		t.Fatalf("round %d: stable blob %x (%v), acknowledged %d", round, blob, err, acks.counter)
	}
	if len(blob) >= 8 {
		if k := binary.BigEndian.Uint64(blob); k < acks.counter || !bytes.Equal(blob, crashBlob(k)) {
			t.Fatalf("round %d: stable blob of %d: %x, acknowledged %d", round, k, blob, acks.counter)
		}
	}
}

// TestCrashChild is TestCrash's child: it starts raft on the store in its directory,
// reports "ready <index of the last command applied> <term>" once it leads and has applied its log, then
// applies 100-byte commands from 8 goroutines, reporting "log <index> <value>" for each
// whose Apply returned, while another goroutine writes a stable counter and a 1 KiB
// blob, reporting "stable <counter> 0" once both returned; until it is killed, or for
// 30 s.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	base, err := strconv.ParseUint(os.Getenv(crashBaseEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn})
	s, r, fsm, err := crashNode(dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), hlog)
	if err != nil {
		t.Fatal(err)
	}
	if err := crashReady(r); err != nil {
		t.Fatal(err)
	}
	var out sync.Mutex
	report := func(what string, a, b uint64) {
		out.Lock()
		defer out.Unlock()
		if _, err := io.WriteString(os.Stdout, fmt.Sprintln(what, a, b)); err != nil {
			os.Exit(2)
		}
	}
	report("ready", fsm.last.Load(), r.CurrentTerm())

	deadline := time.Now().Add(30 * time.Second)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	var wg sync.WaitGroup
	var next atomic.Uint64
	next.Store(base)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				v := next.Add(1)
				f := r.Apply(crashCommand(v), 20*time.Second)
				if err := f.Error(); err != nil {
					fail(fmt.Errorf("apply %d: %w", v, err))
				}
				report("log", f.Index(), v)
			}
		})
	}
	wg.Go(func() {
		for k := base + 1; time.Now().Before(deadline); k++ {
			if err := s.SetUint64(crashCounterKey, k); err != nil {
				fail(err)
			}
			if err := s.Set(crashBlobKey, crashBlob(k)); err != nil {
				fail(err)
			}
			report("stable", k, 0)
		}
	})
	wg.Wait()
	if err := errors.Join(r.Shutdown().Error(), s.Close()); err != nil {
		t.Fatal(err)
	}
}
