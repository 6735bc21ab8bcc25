package cluster

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Retained messages cluster-wide (the replicated set is fsm/retained.go). A retained
// PUBLISH on any node is handed to Retain, which queues it without blocking the poller;
// one goroutine, the retainer, takes everything queued, appends it to the Raft log as one
// entry (forwarded to the leader when this node follows), and waits for the next batch
// only until the leader has applied it. Each change's done (the broker's hold on its
// publisher's PUBACK or PUBREC) is called once this node has applied the entry: once the
// acknowledgement is out, a new subscriber on this node gets the message, and on every
// other node once it has caught up with the log. A change the log does not take, or one
// still waiting at Close, is done not applied.
//
// Order: one entry in flight at a time, so the changes of a topic reach the log in the
// order they were handed over here. Ops are numbered as they are queued (seq); a batch is
// a run of them, and the dones wait for their op's number to be done.
//
// Expiry: the leader looks once a second for messages past their deadline and queues an
// expire op for each (the other nodes never remove one themselves; none serves it after
// its deadline, as delivery checks it).

const (
	// retainQueueBytes bounds the QoS 0 changes queued here (while there is no leader,
	// say): beyond it they are dropped and counted.
	retainQueueBytes = 64 << 20
	// retainBatchBytes bounds one Raft entry of retained changes; what is beyond waits
	// for the next one.
	retainBatchBytes = 1 << 20
	// retainSweepEvery is how often the leader looks for expired retained messages:
	// expiry intervals are whole seconds.
	retainSweepEvery = time.Second
	// retainSweepMax bounds the expire ops of one sweep.
	retainSweepMax = 4096
	// retainNudgeWait bounds a nudge (retainLoop): it only hastens what comes anyway.
	retainNudgeWait = time.Second
	// retainPoll is how often the applied batches are looked at again without a
	// retained entry applied here (a snapshot restored over them).
	retainPoll = 100 * time.Millisecond
)

// retainer queues retained changes and numbers them.
type retainer struct {
	mu      sync.Mutex
	queue   []fsm.RetainOp // copies, in order
	qbytes  int
	next    uint64         // seq of the last op queued
	sent    []sentBatch    // batches the leader applied, in log order, waiting to be applied here
	done    uint64         // every op up to this seq is applied here (or failed)
	waiting []retainWaiter // in seq order
	closed  bool           // Close: a change handed over now is done at once, not applied
	applied uint64         // the index of the last retained entry applied here
	wake    chan struct{}
	entries uint64        // Raft entries appended
	nudges  uint64        // empty entries a follower appended to learn of a commit (nudge)
	failed  uint64        // ops the log did not take (no leader until the deadline, closing)
	dropped uint64        // QoS 0 changes not queued: the queue was full
	wait    time.Duration // an entry's bound to be taken; 0: applyTimeout
	bound   int           // the QoS 0 queue bound; 0: retainQueueBytes
}

// A sentBatch is a run of ops, up to seq last, in the entry at index; a failed one (the
// log did not take it) has the index of the batch before it, so it is done in its turn.
type sentBatch struct {
	index, last uint64
	failed      bool
}

// A retainWaiter is the done of the change numbered seq.
type retainWaiter struct {
	seq  uint64
	done func(applied bool)
}

// A retainDone is a done to call, outside r.mu.
type retainDone struct {
	done    func(applied bool)
	applied bool
}

// callDones calls each done of ds.
func callDones(ds []retainDone) {
	for _, d := range ds {
		d.done(d.applied)
	}
}

// Retain is broker.ClusterRetained's: it queues the retained change m (an empty payload
// clears the topic) for the Raft log, and calls done once this node has applied it or it
// failed. m may be borrowed: Retain copies it. It does not block. A QoS 0 change that
// finds retainQueueBytes queued is dropped (counted); QoS 1 and 2 changes are bounded by
// their publishers' windows, whose acknowledgements wait for them. done is called on the
// retainer's goroutine, on Raft's FSM goroutine under the FSM's lock (appliedHere), at
// Close, or here for a change dropped or handed over after Close.
func (c *Cluster) Retain(m *session.Message, done func(applied bool)) {
	if m.QoS == 0 && c.ret.full() {
		if done != nil {
			done(false)
		}
		return
	}
	o := fsm.RetainOp{Topic: m.Topic(), Payload: m.Payload(), Props: m.Props(), QoS: m.QoS, Expiry: m.Expiry}
	if len(o.Payload) == 0 {
		o.Props, o.QoS, o.Expiry = nil, 0, 0
	}
	buf := make([]byte, 0, len(o.Topic)+len(o.Payload)+len(o.Props))
	buf = append(append(append(buf, o.Topic...), o.Payload...), o.Props...)
	tl, pl := len(o.Topic), len(o.Payload)
	o.Topic, o.Payload, o.Props = buf[:tl:tl], buf[tl:tl+pl:tl+pl], buf[tl+pl:]
	if !c.ret.add(o, done) && done != nil {
		done(false)
	}
}

// full reports whether the queue holds retainQueueBytes, and counts a drop if so.
func (r *retainer) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.qbytes < cmp.Or(r.bound, retainQueueBytes) {
		return false
	}
	r.dropped++
	return true
}

// add queues o, whose done (nil: none) waits for it, and reports false after Close,
// when nothing is queued.
func (r *retainer) add(o fsm.RetainOp, done func(applied bool)) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	r.queue = append(r.queue, o)
	r.qbytes += o.Size()
	r.next++
	if done != nil {
		r.waiting = append(r.waiting, retainWaiter{seq: r.next, done: done})
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

// take returns the ops of the next entry and the seq of its last one.
func (r *retainer) take() ([]fsm.RetainOp, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, size := 0, 0
	for n < len(r.queue) && (n == 0 || size+r.queue[n].Size() <= retainBatchBytes) {
		size += r.queue[n].Size()
		n++
	}
	ops := r.queue[:n:n]
	r.queue = r.queue[n:]
	if len(r.queue) == 0 {
		r.queue = nil // let a burst's array go
	}
	r.qbytes -= size
	return ops, r.next - uint64(len(r.queue))
}

// sentLocked records a batch of ops up to seq last that the leader applied at index, or
// that failed, and returns the dones now due, to call once r.mu is let go. r.mu is held.
func (r *retainer) sentLocked(index, last uint64, failed bool) []retainDone {
	if failed {
		index = 0
		if len(r.sent) > 0 {
			index = r.sent[len(r.sent)-1].index
		}
	}
	r.sent = append(r.sent, sentBatch{index: index, last: last, failed: failed})
	return r.releaseLocked()
}

// appliedHere is told the index of each retained entry this node applies (fsm/retained.go).
func (r *retainer) appliedHere(index uint64) {
	r.mu.Lock()
	r.applied = max(r.applied, index)
	ds := r.releaseLocked()
	r.mu.Unlock()
	callDones(ds)
}

// releaseLocked marks done the batches applied here, in order, and returns the dones of
// their changes, applied unless the batch failed. r.mu is held.
func (r *retainer) releaseLocked() []retainDone {
	var ds []retainDone
	for len(r.sent) > 0 && r.sent[0].index <= r.applied {
		b := r.sent[0]
		r.sent = r.sent[1:]
		r.done = b.last
		n := 0
		for n < len(r.waiting) && r.waiting[n].seq <= b.last {
			ds = append(ds, retainDone{done: r.waiting[n].done, applied: !b.failed})
			n++
		}
		k := copy(r.waiting, r.waiting[n:])
		clear(r.waiting[k:])
		r.waiting = r.waiting[:k]
	}
	return ds
}

// retainLoop appends the queued changes to the log, one entry at a time, until Close.
//
// Only while this node serves clients: when it fences itself (it lost the leader for the
// lease, owner_fence.go), the change in flight and those queued fail, and their publishers'
// connections, closed by the fence, get no acknowledgement. Otherwise a change made on
// the minority side of a partition would be appended once the partition heals, after
// whatever its publisher, sent away with 0x9C, has set since on a node that served it.
func (c *Cluster) retainLoop(ctx context.Context) {
	r := &c.ret
	poll := time.NewTicker(retainPoll)
	defer poll.Stop()
	fences := c.own.counts.selfFenced.Load()
	for {
		select {
		case <-ctx.Done():
			r.close()
			return
		case <-r.wake:
		case <-poll.C:
			// A snapshot restored here covers entries whose own apply this node never
			// saw: raft's applied index tells.
			r.appliedHere(c.raft.AppliedIndex())
			if n := c.own.counts.selfFenced.Load(); n != fences {
				fences = n
				callDones(r.failQueued())
			}
			continue
		}
		for {
			if n := c.own.counts.selfFenced.Load(); n != fences {
				fences = n
				callDones(r.failQueued())
			}
			ops, last := r.take()
			if len(ops) == 0 {
				break
			}
			actx, cancel := context.WithTimeout(leaseBound(ctx), cmp.Or(r.wait, applyTimeout))
			stop := c.untilFenced(actx, cancel, fences)
			_, index, err := c.applyIndexed(actx, fsm.Retains{Ops: ops})
			stop()
			cancel()
			r.mu.Lock()
			if err != nil {
				r.failed += uint64(len(ops))
			} else {
				r.entries++
			}
			ds := r.sentLocked(index, last, err != nil)
			behind := err == nil && r.applied < index && len(r.queue) == 0
			r.mu.Unlock()
			callDones(ds)
			if behind && !c.IsLeader() {
				c.nudge(ctx)
			}
			if err != nil && ctx.Err() == nil {
				c.log.Error("cluster: retained messages not replicated", "changes", len(ops), "err", err)
			}
		}
	}
}

// failQueued fails every change queued: this node fenced itself, and their publishers'
// connections are closed. It returns the dones to call.
func (r *retainer) failQueued() []retainDone {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return nil
	}
	r.failed += uint64(len(r.queue))
	clear(r.queue)
	r.queue, r.qbytes = nil, 0
	return r.sentLocked(0, r.next, true)
}

// nudge appends an empty retains entry, on a follower whose last entry the leader has
// applied but this node has not: a follower learns that an entry is committed from the
// leader's next append, which without another entry comes only after raft's
// CommitTimeout (50 ms). An idle publisher's PUBACK on a follower would wait that long;
// the nudge's append carries the commit at once, for a round trip and one entry. Under
// load the next batch does the same, so no nudge is sent while changes are queued.
func (c *Cluster) nudge(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, retainNudgeWait)
	defer cancel()
	if _, _, err := c.applyIndexed(ctx, fsm.Retains{}); err == nil {
		c.ret.mu.Lock()
		c.ret.nudges++
		c.ret.mu.Unlock()
	}
}

// close calls the done of every change still waiting, not applied (it may not be), and
// makes Retain do so from now on. Close calls it too: the retainer may never have run.
func (r *retainer) close() {
	r.mu.Lock()
	r.closed = true
	ws := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	for _, w := range ws {
		w.done(false)
	}
}

// retainSweep has the leader remove expired retained messages, until Close.
func (c *Cluster) retainSweep(ctx context.Context) {
	t := time.NewTicker(retainSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !c.IsLeader() {
			continue
		}
		for _, o := range c.fsm.ExpiredRetained(time.Now().UnixNano(), retainSweepMax) {
			c.ret.add(o, nil)
		}
	}
}
