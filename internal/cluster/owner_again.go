package cluster

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

// A claim applied twice. A claim batch forwarded to a leader that stops answering is sent
// again to the next leader (raft_leader.go). If the first had appended it and the next has it
// in its log, both entries commit: the id is claimed twice by this node, which is
// harmless to the table (the second is a newer claim of the same node) but not to the
// outcome: the second entry names this node as the previous owner, and the owner before,
// whose connection the first entry fenced and whose session is to be handed over, is in
// the first entry's outcome only. So every batch is traced while it is on its way to
// the log: this node's FSM, applying a claims entry of this node, records the first
// application of the traced batch with the same ids, and a batch that was sent more than
// once takes each id's previous owner from that first application where the last one
// names this node.
//
// When the first application is not seen here in time (this node restored a snapshot
// past it, or lags by more than againWait), the previous owner of an id that the last
// one says this node claimed since the batch was first sent is not known: it is treated
// as one that cannot be asked (unknownOwner), whose connection is closed by the lease
// (owner_handover.go, afterLease); the session is lost.

// againWait bounds the wait of a batch sent more than once for this node's FSM to apply
// its first application: the leader's answer comes when it applied the last one, so the
// first, earlier in the log, is usually applied here already.
const againWait = time.Second

// unknownOwner stands for a previous owner that is not known (above); it is no node's
// name (conf allows letters, digits, '-', '_' and '.').
const unknownOwner = "(unknown)"

// A claimTrace is one batch on its way to the log, and its first application here.
type claimTrace struct {
	ids   []string
	since uint64 // this node's commit index when the batch was first sent
	// Set by the FSM's goroutine under claimTraces.mu; index 0 until applied here.
	index  uint64
	result []byte
	seen   chan struct{} // closed when index is set
}

// claimTraces are the batches in flight: claimWorkers at most.
type claimTraces struct {
	mu   sync.Mutex
	live []*claimTrace
}

// trace starts tracing a batch of ids about to be sent, at commit index since.
func (t *claimTraces) trace(ids []string, since uint64) *claimTrace {
	tr := &claimTrace{ids: ids, since: since, seen: make(chan struct{})}
	t.mu.Lock()
	t.live = append(t.live, tr)
	t.mu.Unlock()
	return tr
}

// end stops tracing tr.
func (t *claimTraces) end(tr *claimTrace) {
	t.mu.Lock()
	if i := slices.Index(t.live, tr); i >= 0 {
		t.live = slices.Delete(t.live, i, i+1)
	}
	t.mu.Unlock()
}

// applied is told of each claims entry of this node the FSM applies here, on its
// goroutine: the first traced batch of those ids not yet applied takes it.
func (t *claimTraces) applied(ids []string, index uint64, result []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range t.live {
		if tr.index == 0 && slices.Equal(tr.ids, ids) {
			tr.index, tr.result = index, result
			close(tr.seen)
			return
		}
	}
}

// firstOutcome returns the outcome of a batch sent more than once, whose last
// application at epoch gave out: for each id that out says this node owned before, the
// previous owner from the batch's first application here, or unknownOwner (see above).
// It waits up to againWait (and ctx) for that first application.
func (c *Cluster) firstOutcome(ctx context.Context, tr *claimTrace, epoch uint64,
	out []fsm.Claimed, as bool) []fsm.Claimed {
	t := time.NewTimer(againWait)
	defer t.Stop()
	select {
	case <-tr.seen:
	case <-t.C:
	case <-ctx.Done():
	}
	c.own.traces.mu.Lock()
	index, result := tr.index, tr.result
	c.own.traces.mu.Unlock()
	var first []fsm.Claimed
	if index != 0 && index < epoch {
		_, first, _ = fsm.DecodeClaimed(result, len(out), as)
	}
	self := c.cfg.NodeName
	for i := range out {
		switch {
		case out[i].Prev != self || out[i].PrevEpoch <= tr.since:
			// Another node's, or this node's from before the batch was sent.
		case first != nil:
			out[i] = first[i]
		default:
			// This node's claim, made after the batch was first sent and not seen
			// here: perhaps that first attempt, applied in a snapshot.
			out[i] = fsm.Claimed{Prev: unknownOwner}
		}
	}
	return out
}
