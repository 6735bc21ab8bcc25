package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
)

// The cluster's totals in $SYS. Every node publishes its own $SYS as a single node does
// (the broker's), and, every sys_interval, the cluster's totals under $SYS/broker/cluster/:
// it asks each live peer for its figures (one Figures call each, in parallel, bounded by
// sysCallTimeout) and adds its own. The totals are retained on this node only, like the
// rest of $SYS; docs/cluster.md lists the topics.

// sysCallTimeout bounds a peer's answer; a peer that does not answer in time is left out
// of the sums (the reporting figure says how many were summed).
const sysCallTimeout = time.Second

// Figures are one node's figures that the cluster sums.
type Figures struct {
	ClientsConnected uint64
	ClientsTotal     uint64 // sessions, connected or not
	Subscriptions    uint64
	Received         uint64 // PUBLISH packets received from clients
	Sent             uint64 // PUBLISH packets sent to clients
}

// Figures answers a peer with this node's figures.
func (s rpcServer) Figures(context.Context, *clusterpb.FiguresRequest) (*clusterpb.FiguresReply, error) {
	f := s.c.figures()
	return &clusterpb.FiguresReply{ClientsConnected: f.ClientsConnected, ClientsTotal: f.ClientsTotal,
		Subscriptions: f.Subscriptions, MessagesReceived: f.Received, MessagesSent: f.Sent}, nil
}

// Totals are the cluster's figures as one node gathered them.
type Totals struct {
	Nodes     int // live members, this one included
	Reporting int // nodes whose figures are summed
	Figures
	Retained int // topics in the replicated retained set
}

// Totals asks every live peer for its figures and sums them with this node's.
func (c *Cluster) Totals(ctx context.Context) Totals {
	t := Totals{Figures: c.figures()}
	t.Nodes, t.Reporting = 1, 1
	t.Retained = c.fsm.RetainedLen()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range c.Members() {
		if m.Name == c.cfg.NodeName || (m.State != "alive" && m.State != "suspect") || m.Meta.ClusterID != c.ClusterID() {
			continue
		}
		t.Nodes++
		cl, err := c.peers.client(m.Name, m.Meta.RPC)
		if err != nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, sysCallTimeout)
			defer cancel()
			r, err := cl.Figures(ctx, &clusterpb.FiguresRequest{})
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			t.Reporting++
			t.ClientsConnected += r.ClientsConnected
			t.ClientsTotal += r.ClientsTotal
			t.Subscriptions += r.Subscriptions
			t.Received += r.MessagesReceived
			t.Sent += r.MessagesSent
		})
	}
	wg.Wait()
	return t
}

// sysLoop publishes the totals every interval until Close.
func (c *Cluster) sysLoop(ctx context.Context) {
	tick := time.NewTicker(c.sysInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t := c.Totals(ctx)
		if ctx.Err() != nil {
			return
		}
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		for _, f := range [...]struct{ topic, value string }{
			{"$SYS/broker/cluster/nodes", strconv.Itoa(t.Nodes)},
			{"$SYS/broker/cluster/nodes/reporting", strconv.Itoa(t.Reporting)},
			{"$SYS/broker/cluster/clients/connected", u(t.ClientsConnected)},
			{"$SYS/broker/cluster/clients/total", u(t.ClientsTotal)},
			{"$SYS/broker/cluster/subscriptions/count", u(t.Subscriptions)},
			{"$SYS/broker/cluster/messages/received", u(t.Received)},
			{"$SYS/broker/cluster/messages/sent", u(t.Sent)},
			{"$SYS/broker/cluster/retained messages/count", strconv.Itoa(t.Retained)},
		} {
			c.publishSys(f.topic, f.value)
		}
	}
}
