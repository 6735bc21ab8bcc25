package cluster

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// The leader this node knows, as Raft tells of its changes (a LeaderObservation: another
// leader, or none while an election runs). An Apply forwarded to the leader runs under
// the context of its leadership (current), which ends at the next change: a leader
// paused (SIGSTOP) or cut off holds the call without an answer until gossip declares it
// dead, seconds after the others have elected a new one, so the command is sent again to
// the new one instead (cluster.go, applyOnce).

// leaderWatch holds the context of the leadership this node knows now.
type leaderWatch struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

// current returns the context of the leadership this node knows now; it ends when Raft
// tells of another.
func (w *leaderWatch) current() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(context.Background())
	}
	return w.ctx
}

// changed ends the current leadership's context.
func (w *leaderWatch) changed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
}

// leaderObservations is how many leader changes may wait for watchLeader: a change
// dropped when they fill is one among others that end the same context.
const leaderObservations = 16

// watchLeader ends the current leadership's context at each leader change Raft observes,
// until ctx ends.
func (c *Cluster) watchLeader(ctx context.Context) {
	ch := make(chan raft.Observation, leaderObservations)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	c.raft.RegisterObserver(obs)
	defer c.raft.DeregisterObserver(obs)
	for {
		select {
		case <-ctx.Done():
			c.leaders.changed() // nothing waits for a leader any more
			return
		case <-ch:
			c.leaders.changed()
		}
	}
}
