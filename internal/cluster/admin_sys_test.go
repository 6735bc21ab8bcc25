package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// sysRecorder is a host with fixed figures that keeps the last value of each $SYS topic
// its node published.
type sysRecorder struct {
	nopHost
	figures broker.SysFigures
	mu      sync.Mutex
	topics  map[string]string
}

func (r *sysRecorder) Figures() broker.SysFigures { return r.figures }

func (r *sysRecorder) Publish(topic string, payload []byte, _ uint8, _ bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics == nil {
		r.topics = map[string]string{}
	}
	r.topics[topic] = string(payload)
	return nil
}

func (r *sysRecorder) get(topic string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.topics[topic]
}

// TestSysTotals: each node publishes the cluster's totals, its peers' figures (asked
// over gRPC) added to its own; a node gone is left out once membership says so.
func TestSysTotals(t *testing.T) {
	recs := make([]*sysRecorder, 3)
	var nodes []*testNode
	for i := range 3 {
		n := uint64(i + 1)
		recs[i] = &sysRecorder{figures: broker.SysFigures{ClientsConnected: n, ClientsTotal: 10 * n, Subscriptions: 100 * n,
			Received: 1000 * n, Sent: 10000 * n}}
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].gossip()}
		}
		nodes = append(nodes, startNode(t, nodeConfig(t, fmt.Sprintf("n%d", i+1), 3, seeds...), func(c *Cluster) {
			c.sysInterval = 50 * time.Millisecond // Options.SysInterval
			c.Attach(recs[i])
		}))
	}
	waitFormed(t, nodes...)
	want := map[string]string{
		"$SYS/broker/cluster/nodes":                   "3",
		"$SYS/broker/cluster/nodes/reporting":         "3",
		"$SYS/broker/cluster/clients/connected":       "6",
		"$SYS/broker/cluster/clients/total":           "60",
		"$SYS/broker/cluster/subscriptions/count":     "600",
		"$SYS/broker/cluster/messages/received":       "6000",
		"$SYS/broker/cluster/messages/sent":           "60000",
		"$SYS/broker/cluster/retained messages/count": "0",
	}
	for i, r := range recs {
		testenv.WaitFor(t, fmt.Sprintf("n%d's totals", i+1), func() bool {
			for topic, v := range want {
				if r.get(topic) != v {
					return false
				}
			}
			return true
		})
	}
	// n3 leaves: the others' totals are theirs alone.
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range recs[:2] {
		testenv.WaitFor(t, fmt.Sprintf("n%d's totals without n3", i+1), func() bool {
			return r.get("$SYS/broker/cluster/nodes") == "2" && r.get("$SYS/broker/cluster/clients/connected") == "3" &&
				r.get("$SYS/broker/cluster/messages/sent") == "30000"
		})
	}
}
