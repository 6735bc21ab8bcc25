package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"github.com/hashicorp/raft"
)

// Self-fencing: a node that has not heard from the Raft leader for cluster.lease may have
// been cut off (a partition, a pause) while its clients' ids were claimed elsewhere; it
// cannot know, so it closes every client connection and refuses CONNECTs until it is in
// contact again and has applied the log up to the leader's commit index. A node that
// takes over a client id from a node it cannot reach waits the lease before it serves the
// id (owner_handover.go): by then the other has fenced itself.
//
// A node starts fenced: it serves no client before it has joined the cluster and caught up.

// fenceAt is the share of the lease after which a node without the leader fences itself:
// short of the lease by two of its watch ticks, so that it has closed its connections
// before a node waiting out the lease serves their ids.
const fenceAt = 0.8

// fenceState is the lease watch's.
type fenceState struct {
	// until is when this node's right to serve ends, Unix ns; 0: fenced. The watch moves
	// it on while the leader is in contact; a node paused past it (SIGSTOP, a stalled VM)
	// finds it expired on waking, before the watch has run again.
	until atomic.Int64
	// writeUntil is when the lease itself ends, (1 - fenceAt) of a lease after until: the
	// last moment this node may write to its clients (the listener's write fence, asked
	// before every write), so that its self-fence's DISCONNECTs still go out while a node
	// waking from a pause writes nothing, not even what it had encoded before. It is not
	// reset when the node fences itself: it runs out by itself.
	writeUntil atomic.Int64
}

// Serving reports whether this node serves clients: it is in contact with the leader and
// caught up. When it is not, ref is the MQTT address of another node to try (the least
// loaded live member), "" when it knows none.
func (c *Cluster) Serving() (ok bool, ref string) {
	if c.ServingAt(time.Now().UnixNano()) {
		return true, ""
	}
	return false, c.otherMQTT()
}

// ServingAt reports whether this node may serve clients at now (Unix ns): an atomic load,
// for the packet path.
func (c *Cluster) ServingAt(now int64) bool { return now < c.own.fence.until.Load() }

// WritableAt reports whether this node may still write to its clients at now (Unix ns):
// its lease has not ended. An atomic load, for every write to a client's socket.
func (c *Cluster) WritableAt(now int64) bool { return now < c.own.fence.writeUntil.Load() }

// otherMQTT returns the MQTT address of the least loaded other live member of this
// cluster; "" when there is none.
func (c *Cluster) otherMQTT() string {
	if c.ms == nil || c.ms.ml == nil {
		return ""
	}
	best, load := "", 2.0
	id := c.ClusterID()
	for _, m := range c.ms.members() {
		if m.Name == c.cfg.NodeName || m.State != "alive" || m.MetaErr != nil || m.Meta.MQTT == "" ||
			m.Meta.Leaving || m.Meta.ClusterID != id {
			continue
		}
		if m.Meta.Load < load {
			best, load = m.Meta.MQTT, m.Meta.Load
		}
	}
	return best
}

// leaseLoop watches the contact with the leader: it moves the lease on while there is
// contact, fences this node when it runs out and lifts the fence once contact is back and
// the log caught up.
func (c *Cluster) leaseLoop(ctx context.Context) {
	lease := time.Duration(c.cfg.Lease)
	hold := time.Duration(float64(lease) * fenceAt)
	tail := lease - hold // writes to clients go on after serving ends: fenceState.writeUntil
	tick := time.NewTicker(lease / 10)
	defer tick.Stop()
	st := &c.own.fence
	fenced := true // a node starts fenced
	for {
		now := time.Now()
		until, in := c.leaseUntil(now, hold, lease/5)
		switch {
		case !fenced && (!in || now.UnixNano() >= st.until.Load()):
			fenced = true
			st.until.Store(0)
			c.own.counts.selfFenced.Add(1)
			leader, _ := c.Leader()
			c.log.Warn("cluster: no contact with the raft leader for the lease: closing every client connection",
				"lease", lease, "leader", leader, "last_contact", c.raft.LastContact())
			c.selfFence()
		case !fenced:
			st.writeUntil.Store(until.Add(tail).UnixNano())
			st.until.Store(until.UnixNano())
		case in && c.caughtUp(ctx, lease):
			fenced = false
			until, _ = c.leaseUntil(time.Now(), hold, lease/5)
			st.writeUntil.Store(until.Add(tail).UnixNano())
			st.until.Store(until.UnixNano())
			c.log.Info("cluster: in contact with the raft leader and caught up: serving clients",
				"applied", c.raft.AppliedIndex())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leaseUntil is how long this node may serve from now: the leader for step (its watch
// renews it; Raft's leader lease steps it down sooner without a quorum), any other node
// until hold after its last contact with a leader (an AppendEntries, or a vote it
// granted), so that an election shorter than the lease fences no one. in reports whether
// that is still ahead.
func (c *Cluster) leaseUntil(now time.Time, hold, step time.Duration) (until time.Time, in bool) {
	if c.ClusterID() == "" {
		return time.Time{}, false
	}
	if _, member := c.suffrage()[c.cfg.NodeName]; !member {
		return time.Time{}, false
	}
	switch c.raft.State() {
	case raft.Leader:
		return now.Add(step), true
	case raft.Follower, raft.Candidate:
		until = c.raft.LastContact().Add(hold)
		return until, now.Before(until)
	}
	return time.Time{}, false
}

// caughtUp reports whether this node has applied the log up to the leader's commit index
// (on the leader, a Barrier), waiting up to timeout.
func (c *Cluster) caughtUp(ctx context.Context, timeout time.Duration) bool {
	if c.raft.State() == raft.Leader {
		return c.raft.Barrier(timeout).Error() == nil
	}
	addr, id := c.raft.LeaderWithID()
	if id == "" {
		return false
	}
	if m, ok := c.ms.lookup(string(id)); ok && m.Meta.RPC != "" {
		addr = raft.ServerAddress(m.Meta.RPC)
	}
	cl, err := c.peers.client(string(id), string(addr))
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cl.Status(ctx, &clusterpb.StatusRequest{})
	if err != nil {
		c.log.Debug("cluster: leader's commit index", "leader", id, "err", err)
		return false
	}
	for c.raft.AppliedIndex() < st.CommitIndex {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond): // raft has no notice of an applied index
		}
	}
	return true
}
