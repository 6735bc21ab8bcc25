package cluster

import (
	"context"
	"errors"
	"time"
)

// What waits for the log while this node serves clients stops when the node fences
// itself (owner_fence.go): a claim or a retained change made before the fence, applied once a
// leader is back (a partition healed), would act for a client the fence sent away, after
// what that client did since on a node that served it.

// leaseBoundKey marks a context: leaseBound.
type leaseBoundKey struct{}

// leaseBound marks ctx for an Apply made for a client of this node: forwarded to the
// leader, the command carries this node's lease, and the leader refuses it once the lease
// has run out (a request the network held back through a partition).
func leaseBound(ctx context.Context) context.Context {
	return context.WithValue(ctx, leaseBoundKey{}, true)
}

// validUntil is what a forwarded Apply with ctx carries as its bound: this node's lease
// for a leaseBound one (errFenced when it has none), else 0.
func (c *Cluster) validUntil(ctx context.Context) (int64, error) {
	if ctx.Value(leaseBoundKey{}) == nil {
		return 0, nil
	}
	until := c.own.fence.until.Load()
	if until == 0 {
		return 0, errFenced
	}
	return until, nil
}

// errFenced fails what a node that fenced itself had not yet applied.
var errFenced = errors.New("cluster: this node lost the raft leader for the lease (fenced itself)")

// fenceWatchEvery is how often a wait for the log looks whether this node fenced itself.
const fenceWatchEvery = 100 * time.Millisecond

// untilFenced cancels ctx (with cancel) once this node has fenced itself more than fences
// times, looking every fenceWatchEvery; stop ends the watch.
func (c *Cluster) untilFenced(ctx context.Context, cancel context.CancelFunc, fences uint64) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(fenceWatchEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				if c.own.counts.selfFenced.Load() != fences {
					cancel()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}
