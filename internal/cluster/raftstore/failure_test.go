package raftstore

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/raft"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// TestWriteFailure: a failed WAL sync fails the write that hit it with an error that
// carries Pebble's fatal error, and every later write with ErrBroken, without entering
// Pebble again until the backoff has passed; the cached indexes keep what was durable,
// and reads go on; the stable store, in a file of its own, goes on too. Then the database
// is reopened by the next write, which succeeds.
func TestWriteFailure(t *testing.T) {
	var failing atomic.Bool
	var walOps atomic.Int64 // writes and syncs of the WAL while failing
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !failing.Load() || !strings.HasSuffix(op.Path, ".log") ||
			op.Kind != errorfs.OpFileWrite && op.Kind != errorfs.OpFileSync && op.Kind != errorfs.OpFileSyncData {
			return nil
		}
		walOps.Add(1)
		return errorfs.ErrInjected
	}))
	s, err := openFS(fs, "/raft", testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	s.backoff = time.Hour // no reopen until the test says

	failing.Store(true)
	err = s.StoreLogs(entries(11, 20, 1))
	var fatal *pebbledb.Fatal
	if !errors.Is(err, ErrBroken) || !errors.As(err, &fatal) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("StoreLogs on a failing WAL = %v, want ErrBroken wrapping Pebble's fatal error", err)
	}
	ops := walOps.Load()
	for name, err := range map[string]error{
		"StoreLogs":   s.StoreLogs(entries(21, 30, 1)),
		"DeleteRange": s.DeleteRange(1, 5),
	} {
		if !errors.Is(err, ErrBroken) {
			t.Errorf("%s after a failed write = %v, want ErrBroken", name, err)
		}
	}
	if err := errors.Join(s.SetUint64([]byte("CurrentTerm"), 2), s.Set([]byte("k"), []byte("v"))); err != nil {
		t.Errorf("the stable store after the log's failed write: %v", err)
	}
	if got := walOps.Load(); got != ops {
		t.Errorf("writes after the failure reached the WAL %d times", got-ops)
	}

	if first, _ := s.FirstIndex(); first != 1 {
		t.Errorf("FirstIndex = %d, want 1", first)
	}
	if last, _ := s.LastIndex(); last != 10 {
		t.Errorf("LastIndex = %d, want 10: the failed write is not durable", last)
	}
	for i := uint64(1); i <= 10; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d) after the failure: %v", i, err)
		}
		if diff := sameLog(&l, entry(i, 1)); diff != "" {
			t.Fatalf("GetLog(%d) after the failure: %s", i, diff)
		}
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 2 || err != nil {
		t.Errorf("GetUint64 after the failure = %d, %v, want 2", v, err)
	}

	failing.Store(false)
	s.writeMu.Lock()
	s.retryAt = time.Time{} // the backoff has passed
	s.writeMu.Unlock()
	if err := s.StoreLogs(entries(11, 20, 1)); err != nil {
		t.Fatalf("StoreLogs once the WAL works again: %v, want the database reopened", err)
	}
	if last, _ := s.LastIndex(); last != 20 {
		t.Errorf("LastIndex after the reopen = %d, want 20", last)
	}
	for i := uint64(1); i <= 20; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d) after the reopen: %v", i, err)
		}
		if diff := sameLog(&l, entry(i, 1)); diff != "" {
			t.Fatalf("GetLog(%d) after the reopen: %s", i, diff)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(entry(11, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("StoreLog after Close = %v, want ErrClosed", err)
	}
}
