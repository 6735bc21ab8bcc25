package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/raft"

	"github.com/bifrost-mqtt/bifrost/internal/diskspace"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// fullDiskSize is the tmpfs of these tests: a few memtables' worth, filled in a blink.
const fullDiskSize = 2 << 20

// TestFullDiskOpen opens a Raft log on a full disk with its write-ahead log still to
// replay. Pebble must write the replay into a table before it opens, and would wait for
// space forever: Open fails at once with ErrNoSpace, naming the directory, what it was
// doing and the space, and logs Pebble's retries at a bounded rate. With next to nothing
// free it does not even try (Pebble would stop the process if its MANIFEST could not be
// written); with some room it tries, and gives up when the table does not fit. Once
// space is freed the log opens (when the open left behind has let the directory go)
// with every entry and stable value it held.
func TestFullDiskOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries uint64 // of 1 KiB
		free    int64  // left free on the disk
	}{
		// 200 KiB, in the WAL, under the first memtable of 256 KiB.
		{"Free=0", 200, 0},
		// 256 KiB flushed, the rest in the WAL: more than is free.
		{"Free=300KiB", 700, 300 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) { testFullDiskOpen(t, tc.entries, tc.free) })
	}
}

func testFullDiskOpen(t *testing.T, entries uint64, free int64) {
	mnt := testenv.Tmpfs(t, fullDiskSize)
	dir := filepath.Join(mnt, "raft")
	s := openTest(t, dir)
	logs := bigEntries(1, entries)
	for _, l := range logs {
		if err := s.StoreLogs([]*raft.Log{l}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, mnt)
	if free > 0 {
		fi, err := os.Stat(filler)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filler, fi.Size()-free); err != nil {
			t.Fatal(err)
		}
	}

	out := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(out, nil)) // written to after the test, by the open left behind
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the open's log:\n%s", out.String())
		}
	})
	opened := make(chan error, 1)
	go func() {
		s, err := Open(dir, log)
		if err == nil {
			_ = s.Close()
		}
		opened <- err
	}()
	var err error
	select {
	case err = <-opened:
	case <-time.After(testenv.Timeout):
		t.Fatalf("Open on a full disk still running after %v", testenv.Timeout)
	}
	t.Logf("open: %v", err)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Open on a full disk: %v, want ErrNoSpace", err)
	}
	for _, want := range []string{dir, "replaying the write-ahead log", "needs up to", "its file system has", "cluster.dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if n := strings.Count(out.String(), "pebble: background error"); n > 2 {
		t.Errorf("%d background errors logged by the failed open; want them limited", n)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var s2 *Store
	testenv.WaitFor(t, "the log to open once space is freed", func() bool {
		s2, err = Open(dir, testLogger(t))
		return err == nil
	})
	defer s2.Close()
	checkEntries(t, s2, logs)
	if v, err := s2.GetUint64([]byte("CurrentTerm")); v != 7 || err != nil {
		t.Errorf("CurrentTerm after the reopen = %d, %v, want 7", v, err)
	}
}

// TestFullDiskWrite fills the disk under StoreLogs. Every write then fails, promptly and
// with ErrNoSpace, whatever Pebble failed on: a WAL write (the database is reopened once
// there is room: the reopen replays the WAL into a table), or a table (a flush, which
// Pebble retries forever and would hold writes until it succeeds). Once the file system
// grows, writes work again without a restart, and a reopened log holds every entry that
// was acknowledged.
func TestFullDiskWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		memTable uint64
		filler   bool // a file fills the disk, not the log
		prefill  int  // entries written before
	}{
		// The log fills the disk, in its first memtable: its WAL write fails first.
		{"MemTable=4MiB/FilledBy=log", memTableSize, false, 0},
		// Another file fills the disk after a few flushes: a flush fails first (the
		// WAL is written over a recycled file), or a WAL write that outgrows it.
		{"MemTable=256KiB/FilledBy=file", 256 << 10, true, 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := testenv.Tmpfs(t, fullDiskSize)
			s, err := openSized(vfs.Default, filepath.Join(mnt, "raft"), testLogger(t), tc.memTable)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			s.backoff = time.Millisecond // a reopen at (nearly) every write
			w := &writer{s: s}
			for range tc.prefill {
				if err := w.put(t); err != nil {
					t.Fatal(err)
				}
			}
			if tc.filler {
				fill(t, mnt)
			}
			for err == nil {
				err = w.put(t)
			}
			t.Logf("disk full after %d entries: %v", len(w.acked), err)
			for range 20 {
				if err := w.put(t); !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("write on the full disk: %v, want ErrNoSpace", err)
				}
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil {
				t.Fatalf("SetUint64 on the full disk: %v, want it saved in place", err)
			}
			testenv.ResizeTmpfs(t, mnt, 16*fullDiskSize)
			testenv.WaitFor(t, "a write to succeed once the file system has grown", func() bool { return w.put(t) == nil })
			if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
				t.Fatal(err)
			}
			if last, _ := s.LastIndex(); last != w.next-1 {
				t.Errorf("LastIndex %d, want %d", last, w.next-1)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openTest(t, filepath.Join(mnt, "raft"))
			checkEntries(t, s2, w.acked)
			if v, err := s2.GetUint64([]byte("CurrentTerm")); v != 3 || err != nil {
				t.Errorf("CurrentTerm after the reopen = %d, %v, want 3", v, err)
			}
		})
	}
}

// A writer stores 1 KiB entries of random bytes (Snappy leaves them as they are), one
// per StoreLogs, as a raft follower appends them: a failed index is written again.
type writer struct {
	s     *Store
	next  uint64 // the next index; 0 means 1
	acked []*raft.Log
}

// put stores the next entry and returns StoreLogs' error, failing t if it does not
// return within testenv.Timeout.
func (w *writer) put(t *testing.T) error {
	t.Helper()
	w.next = max(w.next, 1)
	l := bigEntries(w.next, w.next)[0]
	ch := make(chan error, 1)
	go func() { ch <- w.s.StoreLogs([]*raft.Log{l}) }()
	select {
	case err := <-ch:
		if err == nil {
			w.acked = append(w.acked, l)
			w.next++
		}
		return err
	case <-time.After(testenv.Timeout):
		t.Fatalf("StoreLogs of %d not done after %v", w.next, testenv.Timeout)
		return nil
	}
}

// bigEntries returns the logs from lo to hi in term 1, each with 1 KiB of random data.
func bigEntries(lo, hi uint64) []*raft.Log {
	var logs []*raft.Log
	for i := lo; i <= hi; i++ {
		data := make([]byte, 1024)
		for j := range data {
			data[j] = byte(rand.Uint32())
		}
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(1_800_000_000, int64(i))})
	}
	return logs
}

// checkEntries fails t unless s holds every one of logs.
func checkEntries(t *testing.T, s *Store, logs []*raft.Log) {
	t.Helper()
	for _, want := range logs {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatalf("entry %d of %d acknowledged: %v", want.Index, len(logs), err)
		}
		if diff := sameLog(&got, want); diff != "" {
			t.Fatalf("entry %d: %s", want.Index, diff)
		}
	}
}

// fill writes a file in dir until the file system is full, and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

// lockedBuffer is a log's output, written from Pebble's goroutines and the limiter's
// timers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestFullDiskStall: a write that Pebble stalls (its memtables are full and their flush is
// under way) when that flush then fails on a full disk would wait until a flush
// succeeds, holding raft's main loop. It is given up: it fails with ErrNoSpace as soon
// as the flush fails, and so does every write while it is still in Pebble; once space
// returns Pebble's retry succeeds, the stalled write completes and writes work again,
// and a reopened log holds every entry acknowledged.
func TestFullDiskStall(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	block := make(chan struct{}) // the first flush's table creation waits for it
	var blocked atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".sst") || op.Kind.ReadOrWrite() != errorfs.OpIsWrite || !full.Load() {
			return nil
		}
		if op.Kind == errorfs.OpCreate && blocked.CompareAndSwap(false, true) {
			<-block
		}
		return &iofs.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}))
	s, err := openSized(fs, "/raft", testLogger(t), 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w := &writer{s: s}

	// Fill the memtable, and the next while its flush waits, until a write stalls.
	for {
		l := bigEntries(w.next+1, w.next+1)[0]
		ch := make(chan error, 1)
		go func() { ch <- s.StoreLogs([]*raft.Log{l}) }()
		var stalled bool
		testenv.WaitFor(t, "a write to return or stall", func() bool {
			select {
			case err = <-ch:
				return true
			default:
				stalled = s.w.c.stalled.Load()
				return stalled
			}
		})
		if !stalled {
			if err != nil {
				t.Fatalf("write %d before the stall: %v", l.Index, err)
			}
			w.acked = append(w.acked, l)
			w.next = l.Index
			continue
		}
		t.Logf("write %d stalled after %d entries; the flush fails", l.Index, len(w.acked))
		close(block)
		select {
		case err = <-ch:
		case <-time.After(testenv.Timeout):
			t.Fatalf("the stalled write still waits %v after its flush failed", testenv.Timeout)
		}
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("the stalled write: %v, want ErrNoSpace", err)
		}
		t.Logf("given up: %v", err)
		w.next = l.Index // written again, as raft would
		break
	}
	for range 5 {
		if err := w.put(t); !errors.Is(err, ErrNoSpace) {
			t.Fatalf("a write while the stalled one is in Pebble: %v, want ErrNoSpace", err)
		}
	}
	full.Store(false)
	testenv.WaitFor(t, "a write to succeed once there is space", func() bool { return w.put(t) == nil })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := openFS(fs, "/raft", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	checkEntries(t, s2, w.acked)
}

// TestFullDiskTerm: on a disk so full that the log's writes fail, raft's term and vote
// are still saved (hashicorp/raft stops the process when it cannot save its term): the
// stable file's writes overwrite blocks it already has. Once space is freed a reopened
// store holds them.
func TestFullDiskTerm(t *testing.T) {
	mnt := testenv.Tmpfs(t, fullDiskSize)
	dir := filepath.Join(mnt, "raft")
	s := openTest(t, dir)
	if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, mnt)
	w := &writer{s: s}
	var err error
	for err == nil {
		err = w.put(t)
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("StoreLogs on the full disk: %v, want ErrNoSpace", err)
	}
	t.Logf("the log's writes fail after %d entries: %v", len(w.acked), err)
	for term := uint64(2); term <= 50; term++ {
		for _, err := range []error{
			s.SetUint64([]byte("CurrentTerm"), term),
			s.SetUint64([]byte("LastVoteTerm"), term),
			s.Set([]byte("LastVoteCand"), fmt.Appendf(nil, "127.0.0.1:%d", 7000+term)),
		} {
			if err != nil {
				t.Fatalf("saving term %d on the full disk: %v", term, err)
			}
		}
	}
	if free, ok := diskspace.Free(mnt); ok && free > 4096 {
		t.Fatalf("%d bytes free after the writes: the disk was not full", free)
	}
	t.Logf("close: %v", s.Close()) // the log's failed write-ahead log
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir)
	for key, want := range map[string]uint64{"CurrentTerm": 50, "LastVoteTerm": 50} {
		if v, err := s2.GetUint64([]byte(key)); v != want || err != nil {
			t.Errorf("%s after the reopen = %d, %v, want %d", key, v, err, want)
		}
	}
	if v, err := s2.Get([]byte("LastVoteCand")); string(v) != "127.0.0.1:7050" || err != nil {
		t.Errorf("LastVoteCand after the reopen = %q, %v", v, err)
	}
	checkEntries(t, s2, w.acked)
}
