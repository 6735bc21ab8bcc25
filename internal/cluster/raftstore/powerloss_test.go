package raftstore

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// powerData returns the data of the power-loss test's entry at index: up to 512 bytes
// that depend on the index.
func powerData(index uint64) []byte {
	return bytes.Repeat([]byte{byte(index), byte(index >> 8)}, int(index*31%256))
}

// crashableFS is a vfs.MemFS that takes crash clones without deadlocking: Pebble
// v2.1.7's MemFS.ReuseForWrite holds its clone lock's read side and calls Rename, which
// takes it again, so a CrashClone waiting between the two stops both for ever. It
// creates a new file instead of reusing the old one, which vfs.FS's contract allows.
type crashableFS struct{ *vfs.MemFS }

func (fs crashableFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Remove(oldname); err != nil {
		return nil, err
	}
	return fs.Create(newname, category)
}

// powerAcked is what the power-loss test's writer had acknowledged at a moment.
type powerAcked struct {
	ops     int
	last    uint64 // the highest index stored
	deleted uint64 // entries up to this index were deleted from the front
	counter uint64 // the stable counter
}

// TestPowerLoss writes as raft does (StoreLogs of 1 to 16 entries, front DeleteRanges as
// snapshots compact the log, SetUint64), with memtable flushes in the background, on a
// file system that keeps only what was synced, and takes copies of it as a power cut
// would leave it, at random moments while the writes go on, some with part of the
// unsynced data in them. Each copy must open and hold everything acknowledged before the
// cut: every entry up to the last stored, contiguous and intact, none of the deleted
// ones, and the counter. kill -9 (TestCrash) cannot show a missing fsync, since the
// kernel keeps what the process wrote; this can.
func TestPowerLoss(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := openFS(crashableFS{fs}, "/raft", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()

	var mu sync.Mutex
	var acked powerAcked
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		next := uint64(1)
		for op := 1; op <= 50_000 && !stop.Load(); op++ {
			logs := make([]*raft.Log, 1+rng.IntN(16))
			for i := range logs {
				logs[i] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: powerData(next)}
				next++
			}
			err := s.StoreLogs(logs)
			var deleted uint64
			if err == nil && op%50 == 0 && next > 200 {
				deleted = next - 128
				err = s.DeleteRange(0, deleted)
			}
			if err == nil {
				err = s.SetUint64([]byte("counter"), uint64(op))
			}
			if err == nil && op%100 == 0 { // tables, the MANIFEST and a new WAL, in the background
				_, err = s.db.AsyncFlush()
			}
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			acked.ops, acked.last, acked.counter = op, next-1, uint64(op)
			acked.deleted = max(acked.deleted, deleted)
			mu.Unlock()
		}
		errc <- nil
	}()

	type cut struct {
		fs    *vfs.MemFS
		acked powerAcked
		kept  int // the percentage of unsynced data the copy keeps
	}
	var cuts []cut
	rng := rand.New(rand.NewPCG(3, 4))
	target := 0
	for i := range 12 {
		target += 1 + rng.IntN(150)
		testenv.WaitFor(t, "the writer to go on", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return acked.ops >= target
		})
		mu.Lock()
		a := acked
		mu.Unlock()
		c := cut{acked: a, kept: []int{0, 0, 30, 90}[i%4]}
		c.fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: c.kept, RNG: rand.New(rand.NewPCG(uint64(i), 5))})
		cuts = append(cuts, c)
	}
	stop.Store(true)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if m := s.db.Metrics(); m.Flush.Count == 0 {
		t.Fatal("no memtable was flushed: the cuts hold the WAL only")
	}

	for i, c := range cuts {
		s2, err := openFS(crashableFS{c.fs}, "/raft", testLogger(t))
		if err != nil {
			t.Fatalf("cut %d: open: %v", i, err)
		}
		first, _ := s2.FirstIndex()
		last, _ := s2.LastIndex()
		if first == 0 || last < c.acked.last {
			t.Errorf("cut %d (%+v, %d%% of unsynced data kept): log %d..%d", i, c.acked, c.kept, first, last)
		}
		if first <= c.acked.deleted {
			t.Errorf("cut %d (%+v, %d%% of unsynced data kept): log from %d, deleted up to %d", i, c.acked, c.kept, first, c.acked.deleted)
		}
		for j := first; j <= last; j++ {
			var l raft.Log
			if err := s2.GetLog(j, &l); err != nil || !bytes.Equal(l.Data, powerData(j)) {
				t.Fatalf("cut %d (%+v): log %d..%d: entry %d: %v, %d bytes", i, c.acked, first, last, j, err, len(l.Data))
			}
		}
		if v, err := s2.GetUint64([]byte("counter")); err != nil || v < c.acked.counter {
			t.Errorf("cut %d (%+v): counter %d, %v", i, c.acked, v, err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cut %d after %d ops, %d%% of unsynced data kept: log %d..%d, acknowledged up to %d", i, c.acked.ops, c.kept, first, last, c.acked.last)
	}
}
