package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The tests of a real full disk: the store on a tmpfs (mounting it needs root).

// fullDiskSize is the tmpfs of these tests: a few memtables of the edge profile's.
const fullDiskSize = 2 << 20

// TestFullDiskRunning fills the disk under commits: a commit then fails, and so does
// every later one, each with ErrNoSpace and promptly; once the file system grows,
// commits work again without a restart, and a reopened store has every batch that was
// committed. With the pebble engine the disk fills either in a memtable flush (Pebble
// would stall the next commits until the flush succeeds) or in a WAL write (the
// database is reopened, and that reopen must flush the write-ahead log it replays:
// it must not hang the committer either).
func TestFullDiskRunning(t *testing.T) {
	for _, tc := range []struct {
		name     string
		engine   string
		memtable conf.ByteSize
	}{
		{"Engine=pebble/Fills=flush", conf.EnginePebble, 256 << 10},
		{"Engine=pebble/Fills=WAL", conf.EnginePebble, 64 << 20}, // a memtable larger than the disk: nothing is flushed
		{"Engine=log", conf.EngineLog, 256 << 10},
	} {
		if tc.engine == conf.EnginePebble && !pebbleBuilt {
			continue
		}
		t.Run(tc.name, func(t *testing.T) { testFullDiskRunning(t, tc.engine, tc.memtable) })
	}
}

func testFullDiskRunning(t *testing.T, engine string, memtable conf.ByteSize) {
	mnt := testenv.Tmpfs(t, fullDiskSize)
	cfg := testConfigEngine(engine, filepath.Join(mnt, "store"), conf.SyncAlways)
	cfg.MemtableSize = memtable
	s, err := openHooked(cfg, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	setBackoff(s, time.Millisecond) // a repair at (nearly) every commit
	q := &queuer{s: s}
	q.session(t)
	for err == nil {
		err = q.put(t)
	}
	t.Logf("disk full after %d batches: %v", len(q.acked), err)
	testenv.WaitFor(t, "commits to fail at once on the full disk", func() bool {
		for range 20 {
			if err = q.put(t); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("commit on the full disk: %v, want ErrNoSpace", err)
			}
		}
		// The WAL's case: until the reopen whose flush failed is pending.
		return engine == conf.EngineLog || memtable < 1<<20 || strings.Contains(err.Error(), "replaying the write-ahead log")
	})
	t.Logf("then: %v", err)
	testenv.ResizeTmpfs(t, mnt, 16*fullDiskSize)
	testenv.WaitFor(t, "a commit to succeed once the file system has grown", func() bool { return q.put(t) == nil })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := openHooked(cfg, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	q.check(t, load(t, s2))
}

// TestFullDiskStart opens a store on a full disk, its write-ahead log (pebble) still to
// replay. The pebble engine must flush the replay into a table before it can write, so
// the open fails at once with ErrNoSpace, naming the directory and the space; once the
// space is freed the store opens (when the open left behind has let the directory go)
// with everything committed. The log engine needs no space to open: it opens, and its
// commits fail until space is freed.
func TestFullDiskStart(t *testing.T) { forEngines(t, testFullDiskStart) }

func testFullDiskStart(t *testing.T, engine string) {
	mnt := testenv.Tmpfs(t, fullDiskSize)
	dir := filepath.Join(mnt, "store")
	s := openTest(t, engine, dir, conf.SyncAlways, nil)
	q := &queuer{s: s}
	q.session(t)
	for range 200 { // 200 KiB: in the WAL, under the edge memtable of 256 KiB
		if err := q.put(t); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, mnt)

	cfg := testConfigEngine(engine, dir, conf.SyncAlways)
	opened := make(chan error, 1)
	var s2 *store
	var err error
	go func() {
		s, err := openHooked(cfg, testLogger(t), nil)
		s2 = s
		opened <- err
	}()
	select {
	case err = <-opened:
	case <-time.After(testenv.Timeout):
		t.Fatalf("open on a full disk still running after %v", testenv.Timeout)
	}
	if engine == conf.EnginePebble {
		t.Logf("open: %v", err)
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("open on a full disk: %v, want ErrNoSpace", err)
		}
		for _, want := range []string{dir, "replaying the write-ahead log", "needs up to", "its file system has"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q", want)
			}
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the store to open once space is freed", func() bool {
			s2, err = openHooked(cfg, testLogger(t), nil)
			return err == nil
		})
		t.Cleanup(func() { _ = s2.Close() })
	} else {
		if err != nil {
			t.Fatalf("open on a full disk: %v, want it open", err)
		}
		t.Cleanup(func() { _ = s2.Close() })
		q.s = s2
		err = q.put(t)
		for i := 0; err == nil && i < 64; i++ { // the slack of the log's last page
			err = q.put(t)
		}
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("commit on the full disk: %v, want ErrNoSpace", err)
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "a commit to succeed once space is freed", func() bool { return q.put(t) == nil })
	}
	q.check(t, load(t, s2))
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

// A queuer commits 1 KiB messages of random bytes (Snappy leaves them as they are) to
// the queue of one session, one batch each, and remembers those committed.
type queuer struct {
	s     Store
	seq   uint64
	acked []uint64
}

func (q *queuer) session(t *testing.T) {
	var b Batch
	b.PutSession(SessionRecord{ClientID: "c", Version: 5, Expiry: NeverExpire})
	commit(t, q.s, &b)
}

// put commits the next message, and returns the commit's error, failing t if the commit
// does not finish within testenv.Timeout.
func (q *queuer) put(t *testing.T) error {
	t.Helper()
	q.seq++
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(rand.Uint32())
	}
	var b Batch
	b.PutMessage(q.seq, MessageRecord{Topic: []byte("t"), Payload: payload, QoS: 1})
	b.PutQueued("c", q.seq, QueuedRecord{MessageID: q.seq, QoS: 1})
	ch := make(chan error, 1)
	q.s.Commit(&b, func(err error) { ch <- err })
	select {
	case err := <-ch:
		if err == nil {
			q.acked = append(q.acked, q.seq)
		}
		return err
	case <-time.After(testenv.Timeout):
		t.Fatalf("commit %d not done after %v", q.seq, testenv.Timeout)
		return nil
	}
}

// check fails t unless c holds every message committed.
func (q *queuer) check(t *testing.T, c *collector) {
	t.Helper()
	var missing []uint64
	for _, seq := range q.acked {
		if _, ok := c.queued[fmt.Sprintf("c/%d", seq)]; !ok {
			missing = append(missing, seq)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d committed batches missing after reopen: %v", len(missing), len(q.acked), missing)
	}
}

// TestFullDiskOpenRoom: the pebble engine does not open with less than pebbledb.OpenRoom
// free (128 KiB here, a write-ahead log of 20 KiB to replay, whose table would fit):
// Pebble writes a new MANIFEST at every open, and a failed MANIFEST write on its flush
// goroutine stops the process. The open fails at once with ErrNoSpace, saying so and
// having written nothing; with room it opens with everything committed.
func TestFullDiskOpenRoom(t *testing.T) {
	if !pebbleBuilt {
		t.Skip("the pebble engine is not built")
	}
	mnt := testenv.Tmpfs(t, fullDiskSize)
	dir := filepath.Join(mnt, "store")
	s := openTest(t, conf.EnginePebble, dir, conf.SyncAlways, nil)
	q := &queuer{s: s}
	q.session(t)
	for range 20 {
		if err := q.put(t); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := fill(t, mnt)
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-128<<10); err != nil {
		t.Fatal(err)
	}
	before := listDir(t, dir)

	cfg := testConfigEngine(conf.EnginePebble, dir, conf.SyncAlways)
	s2, err := openHooked(cfg, testLogger(t), nil)
	if err == nil {
		_ = s2.Close()
		t.Fatalf("the store opened with 128 KiB free")
	}
	t.Logf("open: %v", err)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("open with 128 KiB free: %v, want ErrNoSpace", err)
	}
	for _, want := range []string{dir, "replaying the write-ahead log", "a new MANIFEST", "needs up to", "its file system has 128.0 KiB", "store.dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if after := listDir(t, dir); after != before {
		t.Errorf("the refused open changed the directory:\n%s\nwas\n%s", after, before)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s2, err = openHooked(cfg, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	q.check(t, load(t, s2))
}

// listDir returns the names and sizes of the files in dir, a line each.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d\n", e.Name(), fi.Size())
	}
	return b.String()
}
