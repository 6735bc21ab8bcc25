package raftstore

import (
	"context"
	"errors"
	"runtime/pprof"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// A committer applies the Store's batches on a goroutine of its own, so that a write
// that Pebble stalls on a full disk can be given up instead of holding raft's main loop
// until space returns.
//
// Pebble stalls a commit, without a timeout, while its memtables are full and their
// flush has not completed (or level 0 has too many tables): on a full disk the flush
// fails and is retried once a second (pebbledb.TableWatch), forever. refuse keeps writes
// out of Pebble once a flush or table write has failed, but a write let in just before
// may stall. So the writer waits for the commit's result, or for a sign that it stalled
// while Pebble's table writes fail: then it returns ErrNoSpace, and the commit stays in
// Pebble, not acknowledged, until a flush succeeds. Until it has returned, every write
// fails at once (wedged): Pebble would queue them behind it. A stall on a disk that
// writes is waited for: it is Pebble's back-pressure, and ends with the flush.
type committer struct {
	req chan commitReq
	res chan error
	// stall is signalled, without blocking, when Pebble begins a write stall and when a
	// flush or compaction fails; the waiting writer then looks at stalled and at the
	// Store's watches.
	stall   chan struct{}
	stalled atomic.Bool
	// busy: a commit given up is still in Pebble. The writer's, under writeMu.
	busy bool
}

type commitReq struct {
	db *pebble.DB
	b  *pebble.Batch
}

func newCommitter() *committer {
	return &committer{req: make(chan commitReq), res: make(chan error), stall: make(chan struct{}, 1)}
}

// start starts the committer's goroutine; stop ends it.
func (c *committer) start() {
	go pprof.Do(context.Background(), pprof.Labels("bifrost", "raftstore.commit"), func(context.Context) { c.run() })
}

// run applies each batch requested, synced, until req is closed.
func (c *committer) run() {
	for r := range c.req {
		c.res <- applySynced(r.db, r.b)
	}
}

// applySynced applies b to db synced, turning Pebble's fatal commit error into an error.
func applySynced(db *pebble.DB, b *pebble.Batch) (err error) {
	defer pebbledb.Recover(&err)
	return db.Apply(b, pebble.Sync)
}

// listen adds to l the events a committer watches: write stalls, and failed flushes and
// compactions. Pebble calls them with its mutex held, some on the committing goroutine:
// they must not block.
func (c *committer) listen(l *pebble.EventListener) {
	flushEnd := l.FlushEnd
	l.FlushEnd = func(info pebble.FlushInfo) {
		flushEnd(info)
		if info.Err != nil {
			c.signal()
		}
	}
	l.CompactionEnd = func(info pebble.CompactionInfo) {
		if info.Err != nil {
			c.signal()
		}
	}
	l.WriteStallBegin = func(pebble.WriteStallBeginInfo) {
		c.stalled.Store(true)
		c.signal()
	}
	l.WriteStallEnd = func() { c.stalled.Store(false) }
}

func (c *committer) signal() {
	select {
	case c.stall <- struct{}{}:
	default:
	}
}

// errWedged is the cause of the writes refused while a commit given up is in Pebble.
var errWedged = errors.New("a write Pebble stalled on the full disk is still waiting for a flush")

// commit applies b to db and returns its error, or gives it up when Pebble stalls it
// while failing (failing returns the table write's error): then busy is set and the
// error returned wraps failing's. writeMu is held.
func (c *committer) commit(db *pebble.DB, b *pebble.Batch, failing func() error) (err error, givenUp bool) {
	c.req <- commitReq{db, b}
	for {
		select {
		case err := <-c.res:
			return err, false
		case <-c.stall:
			if !c.stalled.Load() {
				continue
			}
			if err := failing(); err != nil {
				c.busy = true
				return err, true
			}
		}
	}
}

// returned reports whether the commit given up has returned, and its error. writeMu is
// held.
func (c *committer) returned() (err error, ok bool) {
	select {
	case err := <-c.res:
		c.busy = false
		return err, true
	default:
		return nil, false
	}
}

// stop ends the committer's goroutine once the commit in Pebble, if any, has returned,
// then calls after (if not nil). writeMu is held.
func (c *committer) stop(after func()) {
	if !c.busy {
		close(c.req)
		if after != nil {
			after()
		}
		return
	}
	go pprof.Do(context.Background(), pprof.Labels("bifrost", "raftstore.commit.abandoned"), func(context.Context) {
		<-c.res
		close(c.req)
		if after != nil {
			after()
		}
	})
}
