package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// BenchmarkClaims measures the claims the registry applies per second: three in-process
// nodes on loopback (Raft's log as this build keeps it), Clients claims in flight at once
// on a follower, each answered when applied. A figure for docs/cluster-owner.md, not a
// test of speed.
func BenchmarkClaims(b *testing.B) {
	for _, inflight := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("Clients=%d", inflight), func(b *testing.B) {
			nodes := benchCluster(b)
			var follower *Cluster
			for _, n := range nodes {
				if !n.IsLeader() {
					follower = n
				}
			}
			sem := make(chan struct{}, inflight)
			var wg sync.WaitGroup
			entries := follower.raft.LastIndex()
			b.ResetTimer()
			for i := range b.N {
				sem <- struct{}{}
				wg.Add(1)
				follower.Claim(broker.Claimant{ClientID: fmt.Sprintf("client-%d", i), Discard: true}, func(o broker.ClaimResult) {
					if o.Err != nil {
						b.Error(o.Err)
					}
					<-sem
					wg.Done()
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
			b.ReportMetric(float64(b.N)/float64(max(follower.raft.LastIndex()-entries, 1)), "claims/entry")
		})
	}
}

// benchCluster starts three formed, serving nodes; the benchmark closes them.
func benchCluster(b *testing.B) []*Cluster {
	b.Helper()
	nodes := benchNodes(b, func(c *Cluster, name string) { c.Attach(&fakeHost{name: name}) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range nodes {
		for ok, _ := c.Serving(); !ok; ok, _ = c.Serving() {
			if ctx.Err() != nil {
				b.Fatal("not serving")
			}
			time.Sleep(10 * time.Millisecond) // polling: the lease watch has no notice
		}
	}
	return nodes
}

// benchNodes starts three nodes, each after prepare, and waits until they formed a
// cluster; the benchmark closes them. They log nothing, so as not to weigh on the
// figures.
func benchNodes(b *testing.B, prepare func(c *Cluster, name string)) []*Cluster {
	b.Helper()
	var nodes []*Cluster
	var seeds []string
	for i := range 3 {
		k := nodeConfig(b, fmt.Sprintf("n%d", i+1), 3, seeds...)
		c, err := New(Options{Config: k, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		prepare(c, k.NodeName)
		b.Cleanup(func() { _ = c.Close() })
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			seeds = []string{c.ms.addr()}
		}
		nodes = append(nodes, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range nodes {
		if err := c.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return nodes
}
