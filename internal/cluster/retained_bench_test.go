package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// BenchmarkRetainedChanges: retained changes handed to a node of three in-process nodes
// on loopback (Raft's log on Pebble), InFlight at a time, each waited for until applied
// on that node (what a publisher's PUBACK waits for), on the leader and on a follower.
func BenchmarkRetainedChanges(b *testing.B) {
	for _, on := range []string{"leader", "follower"} {
		for _, inflight := range []int{1, 64} {
			b.Run(fmt.Sprintf("On=%s/InFlight=%d", on, inflight), func(b *testing.B) {
				nodes := benchRetainedCluster(b)
				var n *Cluster
				for _, c := range nodes {
					if c.IsLeader() == (on == "leader") {
						n = c
					}
				}
				entries := n.ret.entriesNow()
				sem := make(chan struct{}, inflight)
				msg := session.NewLocalMessage("bench/t", []byte(strings.Repeat("p", 64)), 1, true)
				b.ResetTimer()
				for range b.N {
					sem <- struct{}{}
					n.Retain(msg, func(bool) { <-sem })
				}
				for range inflight {
					sem <- struct{}{}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
				b.ReportMetric(float64(b.N)/float64(max(n.ret.entriesNow()-entries, 1)), "changes/entry")
			})
		}
	}
}

func (r *retainer) entriesNow() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries
}

// benchRetainedCluster starts three formed nodes with retained stores; the benchmark
// closes them.
func benchRetainedCluster(b *testing.B) []*Cluster {
	b.Helper()
	nodes := benchNodes(b, func(c *Cluster, _ string) { c.Attach(&syncStore{}) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		leaders := 0
		for _, c := range nodes {
			if c.IsLeader() {
				leaders++
			}
		}
		if leaders == 1 {
			return nodes
		}
		if ctx.Err() != nil {
			b.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond) // polling: leadership has no notice here
	}
}
