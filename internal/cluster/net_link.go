package cluster

import (
	"context"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
)

// linkBackoffMin and linkBackoffMax bound the wait before a link to a peer dials again.
const (
	linkBackoffMin = 50 * time.Millisecond
	linkBackoffMax = 2 * time.Second
)

// keepStream runs stream again and again, with backoff, until ctx or owner (the link's
// own context) ends: a stream to a peer that broke is dialled again, and one that lived
// longer than the longest backoff starts the backoff over. what names it in the log.
func (c *Cluster) keepStream(ctx, owner context.Context, peer, what string, stream func(context.Context) error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(owner, cancel)()
	backoff := linkBackoffMin
	for ctx.Err() == nil {
		start := time.Now()
		err := stream(ctx)
		if ctx.Err() != nil {
			return
		}
		c.log.Debug("cluster: "+what+" stream ended", "peer", peer, "err", err)
		if time.Since(start) > linkBackoffMax {
			backoff = linkBackoffMin
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, linkBackoffMax)
	}
}

// liveClient is the gRPC client of peer while memberlist has it as a member.
func (c *Cluster) liveClient(peer string) (clusterpb.ClusterClient, error) {
	m, ok := c.ms.lookup(peer)
	if !ok {
		return nil, errNotLive
	}
	return c.peers.client(peer, m.Meta.RPC)
}
