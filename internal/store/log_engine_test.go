package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// putInbound commits, one batch each, inbound packet ids from to to-1 of client c.
func putInbound(t *testing.T, s *store, c string, from, to int) {
	t.Helper()
	var b Batch
	for pid := from; pid < to; pid++ {
		b.Reset()
		b.PutSession(SessionRecord{ClientID: c, Version: 5})
		b.PutInbound(c, uint16(pid))
		commit(t, s, &b)
	}
}

// inboundOf returns the inbound packet ids of client c that Load finds in dir.
func inboundOf(t *testing.T, dir, c string) []int {
	t.Helper()
	s := openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
	defer s.Close()
	got := load(t, s)
	var pids []int
	for k := range got.inbound {
		if id, ok := strings.CutPrefix(k, c+"/"); ok {
			n, _ := strconv.Atoi(id)
			pids = append(pids, n)
		}
	}
	return sorted(pids)
}

// onCommitter runs f on s's committer, between two groups: how a test changes what the
// committer reads without a race.
func onCommitter(t *testing.T, s *store, f func()) {
	t.Helper()
	ch := make(chan error, 1)
	s.Commit(new(Batch), func(err error) { f(); ch <- err })
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// recordOffsets returns the offset of every record of the log file at path.
func recordOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(logHeaderSize); off < int64(len(data)); {
		offs = append(offs, off)
		off += recHeaderSize + int64(binary.LittleEndian.Uint32(data[off:]))
	}
	return offs
}

// TestLogTornTail: a log whose last record was cut short or followed by garbage (a
// write that a power loss interrupted, or a file the file system had grown before the
// data reached it) opens with every whole record, cut back to the last of them; the
// store then takes commits again.
func TestLogTornTail(t *testing.T) {
	for _, c := range []struct {
		name string
		tear func(data []byte, last int64) []byte
	}{
		{"HalfHeader", func(d []byte, last int64) []byte { return d[:last+recHeaderSize/2] }},
		{"HalfPayload", func(d []byte, last int64) []byte { return d[:len(d)-3] }},
		{"Zeros", func(d []byte, last int64) []byte { return append(d, make([]byte, 4096)...) }},
		{"ZeroedLast", func(d []byte, last int64) []byte { clear(d[last:]); return d }},
		{"GarbageLast", func(d []byte, last int64) []byte { d[len(d)-1] ^= 0xff; return d }},
		{"GarbageLength", func(d []byte, last int64) []byte { d[last+1] ^= 0x10; return d }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
			putInbound(t, s, "c", 0, 20)
			s.Close()
			path := filepath.Join(dir, logName)
			offs := recordOffsets(t, path)
			last := offs[len(offs)-1]
			data, _ := os.ReadFile(path)
			whole := c.name == "Zeros" // the last record is intact
			if err := os.WriteFile(path, c.tear(data, last), 0o644); err != nil {
				t.Fatal(err)
			}
			want := seq(0, 19)
			if whole {
				want = seq(0, 20)
			}
			if got := inboundOf(t, dir, "c"); !equal(got, want) {
				t.Fatalf("after a torn tail: inbound %v, want %v", got, want)
			}
			if fi, _ := os.Stat(path); whole && fi.Size() != int64(len(data)) || !whole && fi.Size() != last {
				t.Errorf("log of %d bytes after open, want it cut to the last whole record", fi.Size())
			}
			// The store goes on from there.
			s = openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
			putInbound(t, s, "c", 100, 101)
			s.Close()
			if got := inboundOf(t, dir, "c"); !equal(got, append(want, 100)) {
				t.Errorf("after a commit on the cut log: inbound %v", got)
			}
		})
	}
}

func equal(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestLogCorruption: damage to a record that a later record proves was durable
// (acknowledged under always) fails Open with ErrCorrupt naming the file and the offset,
// wherever in the record it is, and the file is left as it was.
func TestLogCorruption(t *testing.T) {
	for _, c := range []struct {
		name string
		at   func(rec int64, data []byte) int64
	}{
		{"Length", func(rec int64, _ []byte) int64 { return rec + 2 }},
		{"Checksum", func(rec int64, _ []byte) int64 { return rec + 5 }},
		{"Synced", func(rec int64, _ []byte) int64 { return rec + 9 }},
		{"Payload", func(rec int64, _ []byte) int64 { return rec + recHeaderSize + 3 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
			putInbound(t, s, "c", 0, 20)
			s.Close()
			path := filepath.Join(dir, logName)
			rec := recordOffsets(t, path)[10]
			data, _ := os.ReadFile(path)
			data[c.at(rec, data)] ^= 0x40
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(testConfigEngine(conf.EngineLog, dir, conf.SyncAlways), testLogger(t))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), fmt.Sprintf("offset %d,", rec)) {
				t.Fatalf("Open = %v, want ErrCorrupt naming %s and offset %d", err, path, rec)
			}
			t.Log(err)
			if after, _ := os.ReadFile(path); len(after) != len(data) {
				t.Errorf("the log was cut from %d to %d bytes", len(data), len(after))
			}
		})
	}
}

// TestLogUnsyncedTail: under interval, the groups written since the last fdatasync may
// reach the disk in any order at a power loss; a damaged one followed by whole ones
// that no fdatasync covered is a torn tail, cut at the damage, not corruption.
func TestLogUnsyncedTail(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfigEngine(conf.EngineLog, dir, conf.SyncInterval)
	cfg.SyncInterval = conf.Duration(1 << 40) // never within the test
	s, err := openHooked(cfg, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	putInbound(t, s, "c", 0, 20)
	path := filepath.Join(dir, logName)
	rec := recordOffsets(t, path)[10]
	data, _ := os.ReadFile(path)
	// A copy of the file as a power loss could leave it: record 10 lost, the rest there.
	crashed := t.TempDir()
	data[rec+recHeaderSize+1] ^= 0x40
	if err := os.WriteFile(filepath.Join(crashed, logName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := inboundOf(t, crashed, "c"); !equal(got, seq(0, 10)) {
		t.Fatalf("inbound %v, want %v", got, seq(0, 10))
	}
}

// TestLogCompaction: past its threshold the log is rewritten with its live records only,
// on the committer, and everything live is there after a reopen, with the records
// committed after the compaction.
func TestLogCompaction(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
	load(t, s) // Load is over: the engine may compact
	e := s.eng.(*logEngine)
	onCommitter(t, s, func() { e.compactAt, e.slack = 64<<10, 16<<10 })
	var b Batch
	payload := make([]byte, 500)
	for i := range 1000 { // 10 live messages at a time, each overwritten 100 times
		b.Reset()
		id := uint64(i % 10)
		b.PutSession(SessionRecord{ClientID: "c", Version: 5})
		b.PutMessage(id, MessageRecord{Topic: []byte("t"), Payload: payload})
		b.PutQueued("c", id, QueuedRecord{MessageID: id, QoS: 1})
		commit(t, s, &b)
	}
	b.Reset()
	b.DeleteSession("gone") // a range deletion in the log, nothing to keep for it
	b.PutInbound("c", 7)
	commit(t, s, &b)
	s.Close()
	written := e.written
	fi, _ := os.Stat(filepath.Join(dir, logName))
	t.Logf("%d bytes written, %d bytes on disk", written, fi.Size())
	if fi.Size() > 64<<10 || written < 500*1000 {
		t.Fatalf("log of %d bytes after %d written: not compacted", fi.Size(), written)
	}
	if _, err := os.Stat(filepath.Join(dir, logTmpName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", logTmpName, err)
	}
	got := load(t, openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil))
	if len(got.messages) != 10 || len(got.queued) != 10 || !got.inbound["c/7"] {
		t.Errorf("after compaction: %d messages, %d queued, inbound %v; want 10, 10, c/7",
			len(got.messages), len(got.queued), got.inbound)
	}
}

// compactionSteps are the steps of a compaction (log_compact.go), each reported before it
// runs; done comes after the last.
var compactionSteps = []string{"create", "write", "sync", "rename", "syncdir", "done"}

// TestLogCompactionFails: a compaction that fails at any step leaves a store that works
// and holds everything, on the old log or the new.
func TestLogCompactionFails(t *testing.T) {
	for _, step := range compactionSteps {
		t.Run("Step="+step, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
			load(t, s)
			e := s.eng.(*logEngine)
			putInbound(t, s, "c", 0, 50)
			failed := false
			onCommitter(t, s, func() {
				e.step = func(at string) error {
					if at == step && !failed {
						failed = true
						return errors.New("injected at " + at)
					}
					return nil
				}
				e.compactAt, e.backoff = 0, 0
			})
			putInbound(t, s, "c", 50, 100)
			s.Close()
			if !failed {
				t.Fatal("no compaction ran")
			}
			if _, err := os.Stat(filepath.Join(dir, logTmpName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left behind: %v", logTmpName, err)
			}
			if got := inboundOf(t, dir, "c"); !equal(got, seq(0, 100)) {
				t.Errorf("inbound %v, want 0..99", got)
			}
		})
	}
}

// TestLogCompactionCrash: a crash at any step of a compaction leaves a directory that
// opens with everything committed before it. The crash is a copy of the directory's
// files taken before the step (after the last one for done).
func TestLogCompactionCrash(t *testing.T) {
	for _, step := range compactionSteps {
		t.Run("Step="+step, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, conf.EngineLog, dir, conf.SyncAlways, nil)
			load(t, s)
			e := s.eng.(*logEngine)
			putInbound(t, s, "c", 0, 50)
			crashed := t.TempDir()
			var copied []string
			onCommitter(t, s, func() {
				e.step = func(at string) error {
					if at == step && copied == nil {
						copied = copyDir(t, dir, crashed)
					}
					return nil
				}
				e.compactAt = 0
			})
			// The compaction runs after the group that set compactAt.
			putInbound(t, s, "c", 50, 51)
			s.Close()
			t.Logf("files at the crash: %v", copied)
			if tmp := step == "write" || step == "sync" || step == "rename"; tmp != slices.Contains(copied, logTmpName) {
				t.Errorf("%s present %v before step %s", logTmpName, !tmp, step)
			}
			if got := inboundOf(t, crashed, "c"); !equal(got, seq(0, 50)) {
				t.Errorf("after the crash: inbound %v, want 0..49", got)
			}
			if got := inboundOf(t, dir, "c"); !equal(got, seq(0, 51)) {
				t.Errorf("without the crash: inbound %v, want 0..50", got)
			}
			if _, err := os.Stat(filepath.Join(crashed, logTmpName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("open left %s: %v", logTmpName, err)
			}
		})
	}
}

// copyDir copies the regular files of dir into to and returns their names.
func copyDir(t *testing.T, dir, to string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, d := range entries {
		data, err := os.ReadFile(filepath.Join(dir, d.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, d.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, d.Name())
	}
	return names
}
