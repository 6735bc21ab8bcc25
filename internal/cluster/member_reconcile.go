package cluster

import (
	"context"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"

	"github.com/hashicorp/raft"
)

// The leader keeps Raft's configuration in step with membership:
//
//   - a live member of this cluster (or one without a cluster id yet) that is not in the
//     configuration is added: as a voter while there are fewer than maxVoters, else as a
//     non-voter; a non-voter is promoted when a voter's place frees up;
//   - a member that leaves gracefully (Close: its metadata says so) is removed;
//   - a member that failed stays: it may come back on its data directory, and removing
//     it would shrink the quorum the survivors need;
//   - a member whose rpc address changed is re-added with the new one;
//   - the first leader of a new cluster writes its identity.
//
// It runs on the control goroutine after every membership or leadership change and every
// controlTick, and only while this node leads.

// raftChangeTimeout bounds one configuration change or the identity entry.
const raftChangeTimeout = 5 * time.Second

func (c *Cluster) reconcile(ctx context.Context) {
	c.ensureIdentity(ctx)
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		c.log.Warn("cluster: read raft configuration", "err", err)
		return
	}
	servers := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, s := range f.Configuration().Servers {
		servers[s.ID] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	ours := c.ClusterID()
	for _, m := range c.ms.members() {
		if ctx.Err() != nil || c.raft.State() != raft.Leader {
			return
		}
		id := raft.ServerID(m.Name)
		s, in := servers[id]
		switch {
		case m.Name == c.cfg.NodeName:
		case m.State == "left" || m.MetaErr == nil && m.Meta.Leaving:
			if in {
				c.change("remove", m.Name, c.raft.RemoveServer(id, 0, raftChangeTimeout))
				if s.Suffrage == raft.Voter {
					voters--
				}
			}
		case m.State != "alive" || m.MetaErr != nil || m.Meta.RPC == "":
		case m.Meta.ClusterID != "" && ours != "" && m.Meta.ClusterID != ours:
			// Refused by membership; never added.
		case !in && voters < maxVoters:
			c.change("add voter", m.Name, c.raft.AddVoter(id, raft.ServerAddress(m.Meta.RPC), 0, raftChangeTimeout))
			voters++
		case !in:
			c.change("add non-voter", m.Name, c.raft.AddNonvoter(id, raft.ServerAddress(m.Meta.RPC), 0, raftChangeTimeout))
		case s.Address != raft.ServerAddress(m.Meta.RPC) && s.Suffrage == raft.Voter:
			c.change("readdress voter", m.Name, c.raft.AddVoter(id, raft.ServerAddress(m.Meta.RPC), 0, raftChangeTimeout))
		case s.Address != raft.ServerAddress(m.Meta.RPC):
			c.change("readdress non-voter", m.Name, c.raft.AddNonvoter(id, raft.ServerAddress(m.Meta.RPC), 0, raftChangeTimeout))
		case s.Suffrage == raft.Nonvoter && voters < maxVoters:
			c.change("promote to voter", m.Name, c.raft.AddVoter(id, s.Address, 0, raftChangeTimeout))
			voters++
		}
	}
}

// change waits for a configuration change and logs its outcome.
func (c *Cluster) change(what, node string, f raft.IndexFuture) {
	if err := f.Error(); err != nil {
		c.log.Warn("cluster: raft configuration change failed", "change", what, "node", node, "err", err)
		return
	}
	c.log.Info("cluster: raft configuration changed", "change", what, "node", node, "index", f.Index())
}

// ensureIdentity writes the cluster id if the applied log has none: after a Barrier, so
// that a leader of an existing cluster first applies the id its log holds.
func (c *Cluster) ensureIdentity(ctx context.Context) {
	if c.fsm.ClusterID() != "" {
		return
	}
	if err := c.raft.Barrier(raftChangeTimeout).Error(); err != nil {
		c.log.Warn("cluster: barrier before the identity", "err", err)
		return
	}
	if c.fsm.ClusterID() != "" {
		return
	}
	id, err := c.Apply(ctx, fsm.Identity{ID: newClusterID()})
	if err != nil {
		c.log.Warn("cluster: write the cluster identity", "err", err)
		return
	}
	c.log.Info("cluster: new cluster", "cluster_id", string(id))
}
