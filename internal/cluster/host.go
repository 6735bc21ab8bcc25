package cluster

import (
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

// The broker of this node, as the cluster calls it: broker.ClusterHost, whose methods
// state their contracts where it is declared (internal/broker/cluster.go). Attach
// connects it, and the rest of the package calls it only through the helpers below, so
// that this file lists every way the engine reaches into the broker. Until a host is
// attached each helper answers as a node without clients would: fences close nothing, a
// hand-over finds no session, forwarded messages are acknowledged and dropped, the node
// routes no filter, lists no session (errNoSessions) and its figures are zero.

// Attach connects the broker of this node. The server attaches it before Start; a host
// attached after Start (tests do) gets everything from then on but the retained set,
// which the FSM drives from Start on (retainedStore). A route stream already running,
// whose snapshot had no filter, sends its snapshot again.
func (c *Cluster) Attach(h broker.ClusterHost) {
	c.attachedHost.Store(&h)
	if c.routes != nil {
		c.routes.resnap()
	}
}

// host is the attached broker; nil before Attach.
func (c *Cluster) host() broker.ClusterHost {
	if h := c.attachedHost.Load(); h != nil {
		return *h
	}
	return nil
}

// fence closes this node's connections of ids, claimed by another node at epoch
// (applied, owner.go).
func (c *Cluster) fence(epoch uint64, ids []string) {
	if h := c.host(); h != nil {
		h.Fence(epoch, ids)
	}
}

// handOver takes cid's session out of the broker for the node that claimed it at epoch
// (the Handover call, owner_handover.go).
func (c *Cluster) handOver(cid string, epoch uint64, discard bool) broker.HandoverResult {
	if h := c.host(); h != nil {
		return h.HandOver(cid, epoch, discard)
	}
	return broker.HandoverResult{Outcome: broker.NoSession}
}

// selfFence closes every client connection: the lease ran out (leaseLoop, owner_fence.go).
func (c *Cluster) selfFence() {
	if h := c.host(); h != nil {
		h.SelfFence()
	}
}

// retainedStore is what the FSM hands the retained set's changes to, taken once at
// Start (cluster.go): the host attached by then, or none.
func (c *Cluster) retainedStore() fsm.RetainedStore {
	if h := c.host(); h != nil {
		return h
	}
	return nil
}

// beginForwarded starts a batch of forwarded messages for the broker's subscribers
// (forward.go); nil without a host: the messages are acknowledged and dropped.
func (c *Cluster) beginForwarded() *broker.Inbound {
	if h := c.host(); h != nil {
		return h.BeginForwarded()
	}
	return nil
}

// routedFilters calls fn with the broker's routes, for a peer's snapshot (routes.go);
// with none without a host.
func (c *Cluster) routedFilters(fn func(filters []string)) {
	if h := c.host(); h != nil {
		h.RoutedFilters(fn)
		return
	}
	fn(nil)
}

// localSessions is a page of the broker's sessions (admin_sessions.go).
func (c *Cluster) localSessions(cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32, error) {
	h := c.host()
	if h == nil {
		return nil, 0, errNoSessions
	}
	page, next := h.Sessions(cursor, limit, f)
	return page, next, nil
}

// figures are the broker's figures that the cluster sums (admin_sys.go).
func (c *Cluster) figures() Figures {
	h := c.host()
	if h == nil {
		return Figures{}
	}
	f := h.Figures()
	return Figures{ClientsConnected: f.ClientsConnected, ClientsTotal: f.ClientsTotal,
		Subscriptions: f.Subscriptions, Received: f.Received, Sent: f.Sent}
}

// publishSys publishes one of the cluster's $SYS topics on this node, retained
// (admin_sys.go).
func (c *Cluster) publishSys(topic, value string) {
	if h := c.host(); h != nil {
		_ = h.Publish(topic, []byte(value), 0, true)
	}
}
