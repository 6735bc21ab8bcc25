package store

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// Group commit.
//
// The broker acknowledges a QoS 1/2 PUBLISH that reaches a persistent session only once
// the store has it, and under the always policy "has it" means fsynced. An fsync costs
// from tens of microseconds (a datacenter NVMe drive) to tens of milliseconds (an SD
// card); one per PUBLISH would cap a broker at a few hundred to a few thousand
// acknowledged messages per second, whatever the number of connections. The store
// therefore commits in groups: one fsync covers every batch that arrived while the
// previous fsync ran.
//
// The mechanism is a queue and one committer goroutine per store:
//
//	Commit (any goroutine)              committer (one goroutine)
//	  lock                                lock
//	  wait while the queue is full        wait while the queue is empty
//	  append {batch, done}                take the whole queue: the group
//	  signal the committer                wake the Commits waiting for room
//	  unlock                              unlock
//	                                      merge the group's batches into one Pebble
//	                                        batch (a few, if it exceeds a chunk)
//	                                      apply it: pebble.Sync under always
//	                                      call each done in order
//
// While the committer applies group n, group n+1 forms in the queue; it holds whatever
// arrived during one commit, so the group size follows the load: one batch when the
// broker is idle (no added latency), hundreds when it is busy (one fsync for hundreds
// of acknowledgements). Under interval and none the committer applies with
// pebble.NoSync. Under interval, the first unsynced write arms a timer; when it fires
// the committer applies its next group with pebble.Sync, or, if none is waiting, asks
// Pebble for a bare WAL fsync (an empty LogData record with Sync). An idle store
// therefore never wakes, and no write stays unsynced longer than SyncInterval plus one
// fsync.
//
// Invariants:
//
//  1. done(nil) runs only after its batch is durable under the policy: under always,
//     after the fsync that followed the write of the batch's group.
//  2. Batches reach the WAL in queue order, and Pebble's WAL is a sequence: when a batch
//     is durable, so is every batch queued before it.
//  3. done functions run on the committer goroutine, in queue order, after the group's
//     write; a group's batches all succeed or all fail with the same error.
//  4. A batch is never split between Pebble batches, so it is atomic on disk; a group
//     is split into chunks of at most chunkBytes (MemtableSize/4), kept under Pebble's
//     large-batch threshold (MemtableSize/2), beyond which a batch becomes a memtable of
//     its own and forces a flush. Only the last chunk is applied with Sync; the WAL
//     being a sequence, its fsync covers the others.
//  5. Every write to Pebble comes from the committer, the periodic fsync included. So
//     the committer can check, before each write, that Pebble's WAL writer has not
//     failed in the background (pebble.go, walWatch): Pebble panics with its commit
//     lock held if it is handed a write after that, and the database could then never
//     be closed and reopened.
//  6. The queue holds at most maxQueue bytes of batches (half the memtable, at least
//     256 KiB: 512 KiB in the edge profile, 16 MiB in the server's), unless a single
//     batch alone is larger; Commit blocks until there is room. A broker event loop
//     that blocks in Commit stops reading from its connections: that is the
//     backpressure DESIGN.md asks for near the limits, and it bounds the memory that
//     waiting batches pin.
//
// Alternatives rejected:
//
//   - Each caller runs db.Apply(b, pebble.Sync) itself. Pebble's commit pipeline already
//     groups the fsyncs of concurrent callers, but each caller blocks for the fsync. The
//     broker's event loops serve thousands of connections each and must not wait on a
//     disk; a goroutine per waiting commit costs a stack (2-8 KiB) each, the very thing
//     the memory model avoids, and still needs a way back to the event loop.
//   - A timer that holds a group open for more batches (Nagle style). It adds its delay
//     at low load, when nothing is gained; the natural group above is as large as the
//     load and the disk's latency make it, and no larger.
//   - A channel as the queue. It bounds batches, not bytes, and is drained one element
//     at a time; the slice taken whole under the lock costs one lock round per group.
//   - Pipelining with Pebble's ApplyNoSyncWait (write group n+1 to the WAL while group
//     n's fsync runs). It is marked experimental, and the gain is small: group n+1
//     still waits for the next fsync, which can start only after the current one.
//   - A syncer goroutine of its own for the interval fsync. Pebble would take its
//     LogData concurrently with the committer's writes, but then two goroutines write,
//     and invariant 5 could not be kept without a lock around every write.
//   - Calling done from Commit when the policy needs no fsync (none). The caller would
//     then see done both inside and outside Commit; one rule, always the committer, is
//     simpler to lock against.

// syncPolicy is conf.Store.Sync, parsed.
type syncPolicy int

const (
	syncAlways syncPolicy = iota
	syncInterval
	syncNone
)

func parseSync(s string) (syncPolicy, error) {
	switch s {
	case conf.SyncAlways, "":
		return syncAlways, nil
	case conf.SyncInterval:
		return syncInterval, nil
	case conf.SyncNone:
		return syncNone, nil
	}
	return 0, fmt.Errorf("store: unknown sync policy %q (want always, interval or none)", s)
}

// defaultQueueBytes bounds the queue of NewMemory's store.
const defaultQueueBytes = 4 << 20

// An engine keeps the records: Pebble on disk, or a map in memory.
type engine interface {
	// write applies the batches of a group in order, each atomically; with sync it
	// returns once they are durable. The committer is its only caller.
	write(group []*Batch, sync bool) error
	// flush makes every write so far durable (the interval policy's timer). The
	// committer is its only caller.
	flush() error
	// iter returns an iterator over the keys in [lower, upper).
	iter(lower, upper []byte) (iterator, error)
	// stats reports the engine's figures for metrics (metrics.go); ok is false when it
	// has none (the memory engine, a database closed after a failure).
	stats() (st engineStats, ok bool)
	close() error
}

// A maintainer is an engine with work to do between groups (the log engine's
// compaction): the committer calls maintain after each group's dones.
type maintainer interface{ maintain() }

// A loadWatcher is an engine that wants to know when Load runs (the log engine keeps the
// index it replayed at open for Load, and only for Load).
type loadWatcher interface {
	loading()
	loaded()
}

// An iterator walks keys in order; pebble.Iterator is one.
type iterator interface {
	First() bool
	SeekGE(key []byte) bool
	Next() bool
	Valid() bool
	Key() []byte
	ValueAndErr() ([]byte, error)
	Error() error
	Close() error
}

// store is the Store of Open and NewMemory: the committer in front of an engine.
type store struct {
	eng      engine
	dir      string // the engine's directory, for messages; "" in memory
	log      *slog.Logger
	policy   syncPolicy
	maxQueue int // bytes of batches the queue holds before Commit blocks

	mu     sync.Mutex
	work   sync.Cond // the committer waits here for a batch or for Close
	room   sync.Cond // Commit waits here for room in the queue
	queue  []pending // guarded by mu
	queued int       // bytes in queue; guarded by mu
	closed bool      // guarded by mu

	// The interval policy's timer: armed by the first unsynced write, it sets syncDue.
	every     time.Duration
	timer     *time.Timer
	syncArmed bool // guarded by mu
	syncDue   bool // guarded by mu

	wg sync.WaitGroup

	// Counted for tests and metrics (metrics.go); written by the committer only.
	commits  atomic.Uint64      // batches written, or tried
	failed   atomic.Uint64      // batches whose commit failed
	groups   atomic.Uint64      // groups written
	flushes  atomic.Uint64      // interval fsyncs, with a group or bare
	written  atomic.Uint64      // bytes of the batches written (Batch.Size)
	duration *metrics.Histogram // time to write a group, its fsync included
}

// A pending commit.
type pending struct {
	b    *Batch
	done func(error)
}

func newStore(eng engine, policy syncPolicy, every time.Duration, maxQueue int, log *slog.Logger) *store {
	s := &store{eng: eng, log: log, policy: policy, maxQueue: maxQueue, every: every,
		duration: newCommitHistogram()}
	s.work.L = &s.mu
	s.room.L = &s.mu
	if policy == syncInterval {
		s.timer = time.AfterFunc(time.Hour, s.syncNow)
		s.timer.Stop()
	}
	s.start("store.commit", s.commitLoop)
	return s
}

// start runs f in a goroutine labelled name (a goroutine profile shows bifrost=name),
// counted so that Close waits for it.
func (s *store) start(name string, f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		pprof.Do(context.Background(), pprof.Labels("bifrost", name), func(context.Context) { f() })
	}()
}

func (s *store) Commit(b *Batch, done func(error)) {
	n := len(b.data)
	s.mu.Lock()
	for !s.closed && len(s.queue) > 0 && s.queued+n > s.maxQueue {
		s.room.Wait()
	}
	if s.closed {
		s.mu.Unlock()
		go done(ErrClosed)
		return
	}
	s.queue = append(s.queue, pending{b, done})
	s.queued += n
	if len(s.queue) == 1 {
		s.work.Signal()
	}
	s.mu.Unlock()
}

// commitLoop is the committer: it writes the queue group by group, and makes the
// periodic fsync of the interval policy, until Close has been called and the queue is
// empty.
func (s *store) commitLoop() {
	var group []pending
	var batches []*Batch
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed && !s.syncDue {
			s.work.Wait()
		}
		if len(s.queue) == 0 && !s.syncDue {
			s.mu.Unlock()
			return
		}
		due := s.syncDue
		s.syncDue = false
		group, s.queue = s.queue, group[:0]
		s.queued = 0
		s.room.Broadcast()
		s.mu.Unlock()

		if len(group) == 0 { // only the interval fsync
			if err := s.eng.flush(); err != nil {
				s.log.Error("store: periodic WAL sync failed", slog.Any("err", err))
			} else {
				s.flushes.Add(1)
			}
			continue
		}
		for _, p := range group {
			batches = append(batches, p.b)
		}
		sync := s.policy == syncAlways || due
		start := time.Now()
		err := s.eng.write(batches, sync)
		s.duration.Observe(time.Since(start).Seconds())
		switch {
		case err != nil:
			err = &writeError{err}
			s.failed.Add(uint64(len(group)))
		case due:
			s.flushes.Add(1)
		case s.policy == syncInterval:
			s.armSync()
		}
		s.groups.Add(1)
		s.commits.Add(uint64(len(group)))
		if err == nil {
			var n int
			for _, b := range batches {
				n += b.Size()
			}
			s.written.Add(uint64(n))
		}
		for i := range group {
			s.call(group[i].done, err)
			group[i] = pending{}
		}
		clear(batches)
		batches = batches[:0]
		if m, ok := s.eng.(maintainer); ok {
			m.maintain()
		}
		if cap(group) > maxKeptGroup { // hand a spike's arrays back
			group, batches = nil, nil
		}
	}
}

// maxKeptGroup is the largest group whose arrays the committer keeps for the next.
const maxKeptGroup = 4096

// armSync starts the interval timer unless it runs.
func (s *store) armSync() {
	s.mu.Lock()
	if !s.syncArmed {
		s.syncArmed = true
		s.timer.Reset(s.every)
	}
	s.mu.Unlock()
}

// syncNow is the interval timer's function: the committer is to fsync.
func (s *store) syncNow() {
	s.mu.Lock()
	s.syncArmed = false
	s.syncDue = true
	s.work.Signal()
	s.mu.Unlock()
}

// call runs done, logging a panic instead of losing the committer, and with it every
// later commit.
func (s *store) call(done func(error), err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("store: commit callback panicked", slog.Any("panic", p),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	done(err)
}

// commitWait commits b and waits for it: for Load's sweep, which runs before the broker
// commits anything.
func (s *store) commitWait(b *Batch) error {
	ch := make(chan error, 1)
	s.Commit(b, func(err error) { ch <- err })
	return <-ch
}

func (s *store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.work.Signal()
	s.room.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
	if s.timer != nil {
		s.timer.Stop()
	}
	return s.eng.close()
}
