package session

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// The journal
//
// A persistent session (session expiry above 0, with a store configured) lives in memory,
// where the broker works with it, and in the store, so that a restart finds it again. The
// Journal is the one path from the first to the second, and it decides when the client
// may learn what the store has.
//
// Staging. Every change to a persistent session's state (a queue entry added, sent,
// released or removed; an inbound QoS 2 id; a subscription; the will; the session itself)
// and every change of a retained message is encoded into the Journal's current batch in
// the same critical section that makes the change in memory: under the session's lock,
// then the Journal's (for retained messages, under the broker's retained lock). One batch
// for the whole broker, filled in lock order, is what keeps the disk in the order the
// memory saw: a PUBLISH queued for a session by one event loop and acknowledged by its
// subscriber on another are staged put-then-delete, whatever order the two loops commit
// in. (Batches per event loop were rejected for that reason: the two loops' batches could
// reach the store in either order, and a delete overtaken by its put resurrects the entry.)
//
// Generations. The current batch is generation n. Commit, called by the broker at the end
// of each poller's round and of each callback that may have staged something, hands it to
// the store and
// opens n+1; a second lock (commitMu) makes the hand-overs reach the store in generation
// order, and the store reports them in that order (store.Store.Commit). Staging never
// blocks on the disk; only Commit may (the store's backpressure), and it is called with no
// lock held, so the committer's callbacks, which take session locks, cannot deadlock with it.
//
// Holding output. What a client is told must not run ahead of the disk: a PUBACK or PUBREC
// for a PUBLISH that a persistent session queued (or that changed a retained message), a
// PUBCOMP after an inbound id is forgotten, a SUBACK for a persistent subscription, a
// PUBLISH whose packet id and sent state a restart must know (a QoS 2 message resent after
// a restart must keep its packet id: that is how the receiver knows not to deliver it
// twice, spec 4.3.3), a PUBREL. The session then holds its whole output (hold.go) until the current
// generation is durable: the bytes stay in its pending buffer, in order, and the session
// waits in the generation's list. When the store reports the generation, the Journal
// releases every waiting session from the committer goroutine: each flushes what it holds
// (Conn.Write only queues). Later packets of a held connection (another PUBACK, a
// PINGRESP) queue behind the held ones, so acknowledgements keep the order their PUBLISHes
// came in [MQTT-4.6.0-2], [MQTT-4.6.0-3], and no ack is sent twice or patched after it left.
//
// Failure. A generation that fails (a full disk, an I/O error) is reported to its waiters:
// a held 5.0 PUBACK or PUBREC has its reason code rewritten in place to Quota exceeded
// (0x97, disk full) or Unspecified error (0x80), and a PUBREC's packet id is forgotten, since
// the exchange ends there; any other held acknowledgement, which has no way to say it
// failed (3.1.1, SUBACK, PUBCOMP), is cut from the output and the connection closed, so the
// client sends again when it reconnects. A failed batch also leaves the disk behind the
// memory, and later batches build on it (a queue entry whose session record was lost is
// swept at Load), so after a failure the Journal rewrites the whole state (the broker's
// resync function: every persistent session deleted and written again, every retained
// message) into one later generation R, at most once per resyncBackoff, and reports every
// generation before R as failed too, however its own write went.
//
// Messages. A message is written once, with an id of the Journal's, when the first
// persistent queue entry or retained topic refers to it; the Journal counts the references
// in memory (refs) and deletes the message with its last one, in the same batch. Load
// sweeps what a crash leaves between those batches.
//
// Lock order: a session's lock → Journal.mu; commitMu is taken with no other lock held and
// is above Journal.mu and every session lock (the resync function runs under it).

// resyncBackoff is the least time between two rewrites of the whole state after failed
// commits: while the disk stays full, commits fail fast, and rewriting everything at each
// one would only burn CPU.
const resyncBackoff = time.Second

// A Journal stages the changes of persistent sessions and retained messages into store
// batches in the order they happen, commits them, and releases the output that sessions
// hold until their changes are durable. Its methods are safe for concurrent use.
type Journal struct {
	st     store.Store
	resync func() // stages the whole state again after a failure; may be nil

	mu         sync.Mutex       // guards the fields below
	cur        *commit          // the batch being staged
	refs       map[uint64]int32 // stored message id → queue entries and retained topics referring to it
	nextID     uint64           // the last message id given out
	committed  uint64           // the last generation handed to the store
	done       uint64           // the last generation the store reported
	idle       sync.Cond        // Wait waits on it for done to reach committed
	needResync bool             // a commit failed: the state must be written again
	trustFrom  uint64           // generations below it are reported failed (see Failure)
	lastErr    error            // the last commit error, reported for untrusted generations
	lastResync time.Time

	staged   atomic.Bool // cur has operations or waiters: Commit's lock-free fast path
	commitMu sync.Mutex  // orders the hand-over of batches to the store
	pool     sync.Pool   // *commit
}

// A commit is one generation: its batch and the sessions holding output for it.
type commit struct {
	j       *Journal
	b       store.Batch
	gen     uint64
	waiters []*Session
	owners  []func(gen uint64, err error) // AwaitDurable's callers
	finish  func(error)                   // c.finished, bound once so that a Commit allocates nothing
}

// NewJournal returns a Journal committing to st. resync, if not nil, is called (under
// no lock of the Journal) to stage the whole state again after a failed commit: it should
// call Session.Rewrite for every session and Journal.RewriteRetained for every retained
// message.
func NewJournal(st store.Store, resync func()) *Journal {
	j := &Journal{st: st, resync: resync, refs: make(map[uint64]int32)}
	j.idle.L = &j.mu
	j.pool.New = func() any {
		c := &commit{j: j}
		c.finish = c.finished
		return c
	}
	j.cur = j.newCommit(1)
	return j
}

func (j *Journal) newCommit(gen uint64) *commit {
	c := j.pool.Get().(*commit)
	c.gen = gen
	return c
}

// begin locks the Journal for staging and returns the current batch; end unlocks it.
func (j *Journal) begin() *store.Batch {
	j.mu.Lock()
	j.staged.Store(true)
	return &j.cur.b
}

func (j *Journal) end() { j.mu.Unlock() }

// Commit hands what has been staged to the store. The broker calls it at the end of every
// callback that may have staged something, with no lock held: it may block while the
// store's queue is full (its backpressure). Cheap when nothing is staged.
func (j *Journal) Commit() {
	if !j.staged.Load() {
		return
	}
	j.commitMu.Lock()
	defer j.commitMu.Unlock()
	j.maybeResync()
	j.mu.Lock()
	c := j.cur
	if c.b.Len() == 0 && len(c.waiters) == 0 && len(c.owners) == 0 {
		j.staged.Store(false)
		j.mu.Unlock()
		return
	}
	j.cur = j.newCommit(c.gen + 1)
	j.staged.Store(false)
	j.committed = c.gen
	j.mu.Unlock()
	// An empty batch with waiters still goes through the store: its report comes after
	// every earlier generation's, which is what the waiters need.
	j.st.Commit(&c.b, c.finish)
}

// maybeResync stages the whole state again if a commit failed and the last rewrite is
// old enough. commitMu is held.
func (j *Journal) maybeResync() {
	j.mu.Lock()
	due := j.needResync && j.resync != nil && time.Since(j.lastResync) >= resyncBackoff
	if due {
		j.needResync = false
		j.lastResync = time.Now()
	}
	j.mu.Unlock()
	if !due {
		return
	}
	j.resync()
	j.mu.Lock()
	j.trustFrom = j.cur.gen
	j.staged.Store(true)
	j.mu.Unlock()
}

// finished is a generation's done callback, on the store's committer goroutine.
func (c *commit) finished(err error) {
	j := c.j
	j.mu.Lock()
	switch {
	case err != nil:
		j.needResync = true
		j.trustFrom = math.MaxUint64
		j.lastErr = err
	case c.gen < j.trustFrom:
		err = fmt.Errorf("%w (an earlier commit failed: %w)", store.ErrWrite, j.lastErr)
	}
	j.mu.Unlock()
	for i, s := range c.waiters {
		s.released(c.gen, err)
		c.waiters[i] = nil
	}
	c.waiters = c.waiters[:0]
	for i, fn := range c.owners {
		fn(c.gen, err)
		c.owners[i] = nil
	}
	c.owners = c.owners[:0]
	j.mu.Lock()
	j.done = c.gen // after the releases: Wait returns once the output is out
	j.idle.Broadcast()
	j.mu.Unlock()
	c.b.Reset()
	j.pool.Put(c)
}

// WaitCommitted blocks until every generation handed to the store before the call has
// been reported: what was committed by then is durable, or its commit failed. Unlike Wait,
// commits made meanwhile do not hold it up.
func (j *Journal) WaitCommitted() {
	j.mu.Lock()
	for gen := j.committed; j.done < gen; {
		j.idle.Wait()
	}
	j.mu.Unlock()
}

// Wait blocks until every generation handed to the store has been reported (and the
// output held for it released). The broker calls it after a Commit when it closes.
func (j *Journal) Wait() {
	j.mu.Lock()
	for j.done < j.committed {
		j.idle.Wait()
	}
	j.mu.Unlock()
}

// waitLocked adds s, which holds output (d), to the current generation's waiters unless
// it is there already, and returns the generation. j.mu and s's lock are held.
func (j *Journal) waitLocked(s *Session, d *durable) uint64 {
	c := j.cur
	if d.holdWait != c.gen {
		c.waiters = append(c.waiters, s)
		d.holdWait = c.gen
	}
	return c.gen
}

// refLocked counts a reference to m, writing m into b first if it is not stored, and
// returns its id. j.mu is held.
//
// While m is stored the Journal holds one pooled reference to it (msgpool.go), dropped
// by unrefLocked with the last stored reference: until then unrefLocked reads m.sid, so m
// must not be recycled; after it, a QoS 1 stream to persistent sessions recycles its
// messages as any other.
func (j *Journal) refLocked(b *store.Batch, m *Message) uint64 {
	if m.sid == 0 {
		m.entryKept()
		j.nextID++
		m.sid = j.nextID
		b.PutMessage(m.sid, m.record())
	}
	j.refs[m.sid]++
	return m.sid
}

// unrefLocked drops a reference to m, deleting it from the store with its last. m may be
// nil (a released entry holds none). j.mu is held.
func (j *Journal) unrefLocked(b *store.Batch, m *Message) {
	if m == nil || m.sid == 0 {
		return
	}
	if n := j.refs[m.sid] - 1; n > 0 {
		j.refs[m.sid] = n
		return
	}
	delete(j.refs, m.sid)
	b.DeleteMessage(m.sid)
	m.sid = 0
	m.Release() // the reference refLocked took
}

// SetRetained stages the change of topic's retained message from old to m (nil: cleared;
// either may be nil). The caller serialises the changes of a topic and makes the one in
// memory in the same critical section, so that the disk sees them in the same order.
func (j *Journal) SetRetained(topic []byte, old, m *Message) {
	b := j.begin()
	defer j.end()
	if m != nil {
		b.PutRetained(string(topic), j.refLocked(b, m))
	} else if old != nil {
		b.DeleteRetained(string(topic))
	}
	j.unrefLocked(b, old)
}

// RewriteRetained stages topic's retained message m again, for the broker's resync: its
// references are counted already.
func (j *Journal) RewriteRetained(topic string, m *Message) {
	b := j.begin()
	defer j.end()
	if m.sid == 0 {
		return // not stored: not the Journal's
	}
	b.PutMessage(m.sid, m.record())
	b.PutRetained(topic, m.sid)
}

// Restored tells the Journal, after the broker's Load, the highest message id the store
// holds: new ids start above it.
func (j *Journal) Restored(maxID uint64) {
	j.mu.Lock()
	j.nextID = max(j.nextID, maxID)
	j.mu.Unlock()
}

// RestoreRetained counts the retained topic's reference to a message Load returned.
func (j *Journal) RestoreRetained(m *Message) {
	j.mu.Lock()
	j.refs[m.sid]++
	j.mu.Unlock()
}

// StoredMessages is the number of messages the Journal counts as stored, for tests and
// metrics.
func (j *Journal) StoredMessages() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.refs)
}

// record is m as the store keeps it.
func (m *Message) record() store.MessageRecord {
	return store.MessageRecord{Topic: m.topic, Payload: m.payload, Props: m.props, Expiry: m.Expiry,
		QoS: m.QoS, Retain: m.Retain}
}
