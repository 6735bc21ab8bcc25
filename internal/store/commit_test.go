package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestGroupCommit commits from many goroutines at once under always: every done is
// called with nil, everything is there after a reopen, and one fsync covers many
// commits.
func TestGroupCommit(t *testing.T) { forEngines(t, testGroupCommit) }

func testGroupCommit(t *testing.T, engine string) {
	const goroutines, each = 32, 50
	dir := t.TempDir()
	h := new(hooks)
	s := openTest(t, engine, dir, conf.SyncAlways, h)
	before := h.syncs.Load()

	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range goroutines {
		wg.Go(func() {
			var b Batch
			done := make(chan error, 1)
			for i := range each {
				id := uint64(g*each + i + 1)
				b.Reset()
				b.PutMessage(id, MessageRecord{Topic: []byte("t"), Payload: make([]byte, 100), QoS: 1})
				b.PutQueued(fmt.Sprint("c", g), uint64(i), QueuedRecord{MessageID: id, QoS: 1})
				s.Commit(&b, func(err error) { done <- err })
				if err := <-done; err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	syncs := h.syncs.Load() - before
	commits, groups := s.commits.Load(), s.groups.Load()
	t.Logf("%d commits in %d groups (%.1f per group), %d WAL fsyncs", commits, groups,
		float64(commits)/float64(groups), syncs)
	if failed.Load() > 0 {
		t.Fatalf("%d commits failed", failed.Load())
	}
	if commits != goroutines*each {
		t.Fatalf("%d commits counted, want %d", commits, goroutines*each)
	}
	if syncs == 0 || syncs > int64(commits)/2 {
		t.Errorf("%d fsyncs for %d commits: want one fsync to cover several commits", syncs, commits)
	}

	var b Batch
	for g := range goroutines {
		b.PutSession(SessionRecord{ClientID: fmt.Sprint("c", g), Version: 5})
	}
	commit(t, s, &b)
	s.Close()
	got := load(t, openTest(t, engine, dir, conf.SyncAlways, nil))
	if len(got.messages) != goroutines*each || len(got.queued) != goroutines*each {
		t.Errorf("after reopen: %d messages, %d queue entries; want %d each",
			len(got.messages), len(got.queued), goroutines*each)
	}
}

// TestSyncPolicies checks who fsyncs the WAL under each policy, before Close.
func TestSyncPolicies(t *testing.T) { forEngines(t, testSyncPolicies) }

func testSyncPolicies(t *testing.T, engine string) {
	for _, sync := range []string{conf.SyncAlways, conf.SyncInterval, conf.SyncNone} {
		t.Run("Sync="+sync, func(t *testing.T) {
			h := new(hooks)
			s := openTest(t, engine, t.TempDir(), sync, h)
			before := h.syncs.Load()
			var b Batch
			for i := range 10 {
				b.Reset()
				b.PutInbound("c", uint16(i))
				commit(t, s, &b)
			}
			switch sync {
			case conf.SyncAlways:
				if n := h.syncs.Load() - before; n != 10 {
					t.Errorf("%d fsyncs for 10 sequential commits, want 10", n)
				}
			case conf.SyncInterval:
				// The syncer fsyncs within the interval (10ms here).
				testenv.WaitFor(t, "the syncer to fsync", func() bool { return s.flushes.Load() > 0 && h.syncs.Load() > before })
				// And not again while nothing is written.
				n := s.flushes.Load()
				time.Sleep(50 * time.Millisecond)
				if m := s.flushes.Load(); m != n {
					t.Errorf("%d fsyncs while idle, want none", m-n)
				}
			case conf.SyncNone:
				if n := h.syncs.Load() - before; n != 0 {
					t.Errorf("%d fsyncs under none", n)
				}
			}
		})
	}
}

// TestCommitOrder calls done in Commit order.
func TestCommitOrder(t *testing.T) { forEngines(t, testCommitOrder) }

func testCommitOrder(t *testing.T, engine string) {
	s := openTest(t, engine, t.TempDir(), conf.SyncNone, nil)
	const n = 1000
	batches := make([]Batch, n)
	var got []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range batches {
		batches[i].PutInbound("c", uint16(i))
		s.Commit(&batches[i], func(err error) {
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			wg.Done()
		})
	}
	wg.Wait()
	for i, v := range got {
		if v != i {
			t.Fatalf("done %d called in position %d", v, i)
		}
	}
}

// gateEngine is an engine whose writes wait for the test.
type gateEngine struct {
	*memEngine
	gate chan struct{}
}

func (e *gateEngine) write(group []*Batch, sync bool) error {
	<-e.gate
	return e.memEngine.write(group, sync)
}

// TestBackpressure blocks Commit while the queue is full, and Close releases it.
func TestBackpressure(t *testing.T) {
	e := &gateEngine{memEngine: newMemEngine(), gate: make(chan struct{})}
	s := newStore(e, syncAlways, 0, 100, testLogger(t))
	big := func() *Batch {
		var b Batch
		b.PutMessage(1, MessageRecord{Payload: make([]byte, 80)})
		return &b
	}
	results := make(chan error, 4)
	done := func(err error) { results <- err }
	s.Commit(big(), done) // taken by the committer, which waits at the gate
	testenv.WaitFor(t, "the committer to take the first group", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) == 0 })
	s.Commit(big(), done) // queued: the queue was empty
	returned := make(chan struct{})
	go func() {
		s.Commit(big(), done) // the queue is full: blocks
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("Commit returned with a full queue")
	case <-time.After(50 * time.Millisecond):
	}
	e.gate <- struct{}{} // the first group is written; the committer takes the second
	<-returned
	close(e.gate)
	for range 3 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}

	// Close wakes a blocked Commit, which fails with ErrClosed.
	e2 := &gateEngine{memEngine: newMemEngine(), gate: make(chan struct{})}
	s2 := newStore(e2, syncAlways, 0, 100, testLogger(t))
	s2.Commit(big(), done)
	testenv.WaitFor(t, "the committer to take the first group", func() bool { s2.mu.Lock(); defer s2.mu.Unlock(); return len(s2.queue) == 0 })
	s2.Commit(big(), done)
	go s2.Commit(big(), done) // blocks, or finds the store closed
	closed := make(chan error)
	go func() { closed <- s2.Close() }()
	close(e2.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	var ok, closedErrs int
	for range 3 {
		switch err := <-results; {
		case err == nil:
			ok++
		case errors.Is(err, ErrClosed):
			closedErrs++
		default:
			t.Fatal(err)
		}
	}
	if ok < 2 {
		t.Errorf("%d commits before Close succeeded, want at least 2", ok)
	}
	s.Close()
}

// TestDonePanic survives a panicking done: the next commit still works.
func TestDonePanic(t *testing.T) {
	s := NewMemory()
	defer s.Close()
	var b Batch
	b.PutInbound("c", 1)
	s.Commit(&b, func(error) { panic("boom") })
	var b2 Batch
	b2.PutInbound("c", 2)
	commit(t, s, &b2)
}

// TestLargeGroups commits groups larger than a chunk (Pebble's, a quarter of the edge
// profile's 256 KiB memtable, and the log engine's write), and a batch larger than
// Pebble's large-batch threshold: all of it is there after a reopen.
func TestLargeGroups(t *testing.T) { forEngines(t, testLargeGroups) }

func testLargeGroups(t *testing.T, engine string) {
	const chunkBytes = 64 << 10
	dir := t.TempDir()
	s := openTest(t, engine, dir, conf.SyncAlways, nil)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			var b Batch
			for i := range 8 {
				b.Reset()
				id := uint64(g*8 + i + 1)
				b.PutMessage(id, MessageRecord{Topic: []byte("t"), Payload: make([]byte, 20<<10)})
				b.PutRetained(fmt.Sprint("t/", id), id)
				commit(t, s, &b)
			}
		})
	}
	var huge Batch
	huge.PutMessage(1000, MessageRecord{Topic: []byte("huge"), Payload: make([]byte, 2*chunkBytes+1)})
	huge.PutRetained("huge", 1000)
	commit(t, s, &huge)
	wg.Wait()
	t.Logf("%d commits in %d groups; chunk %d bytes", s.commits.Load(), s.groups.Load(), chunkBytes)
	s.Close()
	got := load(t, openTest(t, engine, dir, conf.SyncAlways, nil))
	if len(got.messages) != 32*8+1 || len(got.retained) != 32*8+1 {
		t.Errorf("after reopen: %d messages, %d retained; want %d", len(got.messages), len(got.retained), 32*8+1)
	}
	if m := got.messages[1000]; len(m.Payload) != 2*chunkBytes+1 {
		t.Errorf("huge message: %d bytes", len(m.Payload))
	}
}
