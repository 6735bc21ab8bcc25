package cluster

import (
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// The Cluster's side of broker.ClusterRoutes (cluster_routes.go in package broker).

var _ broker.ClusterRoutes = (*Cluster)(nil)

// AddRoute is broker.ClusterRoutes'.
func (c *Cluster) AddRoute(filter string, first bool, done func()) bool {
	v := c.routes.add(filter, first)
	if done == nil {
		return false
	}
	return c.routes.wait(v, done)
}

// RemoveRoute is broker.ClusterRoutes'.
func (c *Cluster) RemoveRoute(filter string) { c.routes.remove(filter) }

// RemoteGroup is broker.ClusterRoutes'.
func (c *Cluster) RemoteGroup(share string) bool {
	_, ok := c.routes.remote.GroupOf([]byte(share))
	return ok
}

// Forward is broker.ClusterRoutes'.
func (c *Cluster) Forward(o *broker.Outbound, done func()) int { return c.fwd.Forward(o, done) }

// ForwardShared is broker.ClusterRoutes'.
func (c *Cluster) ForwardShared(m *session.Message, share string) bool {
	return c.fwd.forwardShared(m, share)
}

// knowsPeers reports whether this node has tried its seeds once (memberlist's join merges
// the seed's member list before it returns) or has been formed: before, a node that has
// just started knows no peer, and a SUBACK with no peer to wait for would be routed
// nowhere.
func (c *Cluster) knowsPeers() bool {
	if c.joinTried.Load() {
		return true
	}
	select {
	case <-c.formed:
		return true
	default:
		return false
	}
}

// liveMembers returns the other members gossip says are alive, with readable metadata.
// A suspect is one of them: it missed a probe of this node's and may well be alive, so
// its links stay and SUBACKs wait for it until failure detection declares it dead.
func (c *Cluster) liveMembers() []Member {
	if c.ms == nil {
		return nil
	}
	var out []Member
	for _, m := range c.ms.members() {
		if (m.State == "alive" || m.State == "suspect") && m.Name != c.cfg.NodeName && m.MetaErr == nil && m.Meta.RPC != "" {
			out = append(out, m)
		}
	}
	return out
}

// livePeers returns the names of liveMembers.
func (c *Cluster) livePeers() []string {
	ms := c.liveMembers()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}
