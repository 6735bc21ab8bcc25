package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"github.com/hashicorp/raft"
)

// Forming a new cluster (bootstrap_expect), so that a cold start never splits:
//
//   - a node with Raft state, or that knows a cluster id, never bootstraps: it is in a
//     cluster already, or will be added to one;
//   - a node without state bootstraps only once it sees bootstrap_expect alive members
//     without state or cluster id, none with, and every one of them names the same set
//     (asked over gRPC, which also catches a peer that bootstrapped a moment ago);
//   - then each of them bootstraps with the identical configuration of that set, sorted
//     by name, the first maxVoters voters and the rest non-voters: Raft accepts identical
//     bootstraps (Consul forms its servers the same way), and the first leader writes the
//     cluster id.
//
// A node that does not bootstrap loses nothing: Raft replicates the configuration to
// every member of it, and the leader adds members it lacks (member_reconcile.go). With
// bootstrap_expect 1 and other seeds, the node first tries its seeds once, so that it
// joins a cluster that is there instead of founding its own.

// maxVoters is the most voters a configuration gets: five tolerate two failures, and more
// would slow every commit for little gain; later members are non-voters.
const maxVoters = 5

// bootstrapPlan returns the members to bootstrap with, sorted by name, or why not yet.
// members is this node's view, itself included.
func bootstrapPlan(expect int, members []Member) (set []Member, why string) {
	for _, m := range members {
		if m.State != "alive" || m.MetaErr != nil || m.Meta.Leaving {
			continue
		}
		if m.Meta.HasState || m.Meta.ClusterID != "" {
			return nil, fmt.Sprintf("%s is in a cluster already; waiting to be added to it", m.Name)
		}
		set = append(set, m)
	}
	if len(set) < expect {
		return nil, fmt.Sprintf("waiting for %d nodes without state to see each other (bootstrap_expect); %d so far: %s",
			expect, len(set), strings.Join(names(set), ", "))
	}
	slices.SortFunc(set, func(a, b Member) int { return cmpString(a.Name, b.Name) })
	return set, ""
}

func names(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// bootstrapConfiguration is Raft's configuration for set.
func bootstrapConfiguration(set []Member) raft.Configuration {
	var c raft.Configuration
	for i, m := range set {
		s := raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.Name), Address: raft.ServerAddress(m.Meta.RPC)}
		if i >= maxVoters {
			s.Suffrage = raft.Nonvoter
		}
		c.Servers = append(c.Servers, s)
	}
	return c
}

// bootstrapTimeout bounds asking one peer for its status before a bootstrap.
const bootstrapTimeout = 2 * time.Second

// tryBootstrap bootstraps Raft if the plan is ready and every peer in it agrees; it logs
// why not when that changes.
func (c *Cluster) tryBootstrap(ctx context.Context) {
	if c.cfg.BootstrapExpect == 1 && !c.joinTried.Load() {
		c.bootstrapWait("trying the seeds once before founding a cluster alone (bootstrap_expect 1)")
		return
	}
	set, why := bootstrapPlan(c.cfg.BootstrapExpect, c.ms.members())
	if set == nil {
		c.bootstrapWait(why)
		return
	}
	want := names(set)
	for _, m := range set {
		if m.Name == c.cfg.NodeName {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, bootstrapTimeout)
		st, err := c.peerStatus(actx, m)
		cancel()
		switch {
		case err != nil:
			c.bootstrapWait(fmt.Sprintf("%s does not answer yet: %v", m.Name, err))
			return
		case st.HasState || st.ClusterId != "":
			c.bootstrapWait(fmt.Sprintf("%s is in a cluster already; waiting to be added to it", m.Name))
			return
		case !slices.Equal(st.BootstrapSet, want):
			c.bootstrapWait(fmt.Sprintf("%s sees %v, this node %v; waiting for the views to agree", m.Name, st.BootstrapSet, want))
			return
		}
	}
	err := c.raft.BootstrapCluster(bootstrapConfiguration(set)).Error()
	switch {
	case errors.Is(err, raft.ErrCantBootstrap):
		c.log.Info("cluster: raft state appeared meanwhile; not bootstrapping")
	case err != nil:
		c.log.Error("cluster: bootstrap failed", "err", err)
		return
	default:
		c.log.Info("cluster: bootstrapped a new cluster", "members", want)
	}
	c.bootstrapped.Store(true)
}

// bootstrapWait logs why this node does not bootstrap yet, once per reason.
func (c *Cluster) bootstrapWait(why string) {
	if why == c.lastWhy {
		return
	}
	c.lastWhy = why
	c.log.Info("cluster: not forming a cluster yet", "why", why)
}

// peerStatus asks m for its status over gRPC.
func (c *Cluster) peerStatus(ctx context.Context, m Member) (*clusterpb.StatusReply, error) {
	cl, err := c.peers.client(m.Name, m.Meta.RPC)
	if err != nil {
		return nil, err
	}
	return cl.Status(ctx, &clusterpb.StatusRequest{})
}

// bootstrapSet is what this node would bootstrap with now, for a peer's Status call.
func (c *Cluster) bootstrapSet() []string {
	if c.hasState() || c.ClusterID() != "" {
		return nil
	}
	set, _ := bootstrapPlan(c.cfg.BootstrapExpect, c.ms.members())
	return names(set)
}
