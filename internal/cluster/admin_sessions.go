package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The sessions of every node, for the admin API's listing of one node or of the whole
// cluster, asked on any node. A node answers a page of its own sessions (the broker's
// Sessions: a bounded walk of its table by session number, no copy of it); the asking
// node's admin API walks the nodes in SessionNodes' order with a cursor naming the node
// and the number in its table (internal/admin). A node that is down is an error the
// listing reports, not a silent gap.

// sessionsTimeout bounds a peer's answer to one page.
const sessionsTimeout = 2 * time.Second

// maxSessionsPage bounds the page a peer may ask for: the admin API's largest.
const maxSessionsPage = 1000

// errNoSessions: the node was not connected to a broker.
var errNoSessions = errors.New("cluster: this node lists no sessions")

// Sessions answers a peer with a page of this node's sessions.
func (s rpcServer) Sessions(_ context.Context, req *clusterpb.SessionsRequest) (*clusterpb.SessionsReply, error) {
	limit := int(min(max(req.Limit, 1), maxSessionsPage))
	page, next, err := s.c.localSessions(req.Cursor, limit, broker.SessionFilter{Online: req.Online, Prefix: req.ClientIdPrefix,
		Username: req.Username, Listener: req.Listener, Persistent: req.Persistent})
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &clusterpb.SessionsReply{Next: next, Sessions: make([]*clusterpb.SessionInfo, len(page))}
	for i, in := range page {
		var since int64
		if !in.ConnectedSince.IsZero() {
			since = in.ConnectedSince.UnixNano()
		}
		out.Sessions[i] = &clusterpb.SessionInfo{ClientId: in.ClientID, Username: in.Username, Online: in.Online,
			Persistent: in.Persistent, Protocol: in.Protocol, Listener: in.Listener, Address: in.Address,
			KeepAlive: uint32(in.KeepAlive), ConnectedSince: since, Inflight: uint32(in.Inflight),
			Queued: uint32(in.Queued), ExpiryInterval: in.ExpiryInterval}
	}
	return out, nil
}

// SessionNodes returns the names of the nodes a cluster-wide listing walks, sorted: this
// one, every member of this cluster gossip knows that has not left (a failed one
// included: its clients are unreachable, which the listing says), and every server of
// the Raft configuration.
func (c *Cluster) SessionNodes() []string {
	names := map[string]bool{c.cfg.NodeName: true}
	ours := c.ClusterID()
	for _, m := range c.Members() {
		if m.State != "left" && m.Meta.ClusterID == ours {
			names[m.Name] = true
		}
	}
	if c.raft != nil {
		for name := range c.suffrage() {
			names[name] = true
		}
	}
	out := make([]string, 0, len(names))
	for name := range names {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// NodeSessions returns a page of node's sessions as broker.ClusterHost.Sessions does:
// this node's from its broker, another's over gRPC within sessionsTimeout. The error says
// why a node did not answer: it failed or left, it is unknown, or the call failed.
func (c *Cluster) NodeSessions(ctx context.Context, node string, cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32, error) {
	if node == c.cfg.NodeName {
		return c.localSessions(cursor, limit, f)
	}
	members := c.Members()
	i := slices.IndexFunc(members, func(m Member) bool { return m.Name == node })
	if i < 0 {
		return nil, 0, fmt.Errorf("%s: not a member this node's gossip knows", node)
	}
	m := members[i]
	switch {
	case m.State == "dead" || m.State == "left":
		return nil, 0, fmt.Errorf("%s: %s, as gossip says", node, map[string]string{"dead": "failed", "left": "left the cluster"}[m.State])
	case m.MetaErr != nil:
		return nil, 0, fmt.Errorf("%s: its metadata: %w", node, m.MetaErr)
	}
	cl, err := c.peers.client(node, m.Meta.RPC)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, sessionsTimeout)
	defer cancel()
	r, err := cl.Sessions(ctx, &clusterpb.SessionsRequest{Cursor: cursor, Limit: uint32(min(max(limit, 1), maxSessionsPage)),
		Online: f.Online, ClientIdPrefix: f.Prefix, Username: f.Username, Listener: f.Listener, Persistent: f.Persistent})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %s", node, status.Convert(err).Message())
	}
	page := make([]broker.SessionInfo, len(r.Sessions))
	for i, in := range r.Sessions {
		page[i] = broker.SessionInfo{ClientID: in.ClientId, Username: in.Username, Online: in.Online,
			Persistent: in.Persistent, Protocol: in.Protocol, Listener: in.Listener, Address: in.Address,
			KeepAlive: uint16(in.KeepAlive), Inflight: int(in.Inflight), Queued: int(in.Queued),
			ExpiryInterval: in.ExpiryInterval}
		if in.ConnectedSince != 0 {
			page[i].ConnectedSince = time.Unix(0, in.ConnectedSince).UTC()
		}
	}
	return page, r.Next, nil
}
