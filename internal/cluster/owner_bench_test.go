package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
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
				follower.Claim(fmt.Sprintf("client-%d", i), true, func(_ uint64, _ bool, _ []byte, err error) {
					if err != nil {
						b.Error(err)
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
	var nodes []*Cluster
	var seed []string
	for i := range 3 {
		k := &conf.Cluster{NodeName: fmt.Sprintf("n%d", i+1), Bind: "127.0.0.1:0", RPC: "127.0.0.1:0", Seeds: seed,
			BootstrapExpect: 3, Dir: b.TempDir(), RedirectLoad: 0.9, Lease: conf.DefaultClusterLease}
		c, err := New(Options{Config: k, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		c.SetHost(&fakeHost{name: k.NodeName})
		if i == 0 {
			seed = []string{c.ms.addr()}
		}
		nodes = append(nodes, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range nodes {
		if err := c.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		for ok, _ := c.Serving(); !ok; ok, _ = c.Serving() {
			if ctx.Err() != nil {
				b.Fatal("not serving")
			}
			time.Sleep(10 * time.Millisecond) // polling: the lease watch has no notice
		}
	}
	return nodes
}
