package metrics

import (
	"math"
	"runtime/debug"
	rtmetrics "runtime/metrics"
)

// LoadInput is what the load figure is computed from, sampled by the broker.
type LoadInput struct {
	Connections    int64 `json:"connections"`
	MaxConnections int64 `json:"max_connections"` // 0: no cap, connections do not count
	// MemoryBytes is the memory the Go runtime counts against its limit.
	MemoryBytes      uint64 `json:"memory_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes"` // 0: no limit, memory does not count
}

// LoadReport is the body of GET /load: the figure and the inputs behind it, and on a
// node of a cluster every node as this one knows it.
type LoadReport struct {
	Load float64 `json:"load"`
	LoadInput
	Nodes []NodeLoad `json:"nodes,omitempty"`
}

// NodeLoad is one node of the cluster in GET /load: how to reach it, its load figure as
// it last told the others (gossip, refreshed every second or so), and how it is.
type NodeLoad struct {
	Name string `json:"name"`
	// State is alive, suspect (it did not answer this node's last probe), leaving
	// (closing), dead (failed) or left (gone gracefully).
	State  string  `json:"state"`
	Leader bool    `json:"leader"`         // the Raft leader as this node knows it
	Self   bool    `json:"self,omitempty"` // the node that answered
	RPC    string  `json:"rpc,omitempty"`
	MQTT   string  `json:"mqtt,omitempty"`
	Load   float64 `json:"load"`
}

// Load returns how full the node is, from 0 (idle) to 1 (full): the larger of the
// connection share and the memory share. The larger and not the mean, because the node
// starts refusing clients when either runs out, so a balancer must steer away from it
// as soon as one is nearly used up. A resource without a cap does not count.
func Load(in LoadInput) float64 {
	var load float64
	if in.MaxConnections > 0 {
		load = float64(max(in.Connections, 0)) / float64(in.MaxConnections)
	}
	if in.MemoryLimitBytes > 0 {
		load = max(load, float64(in.MemoryBytes)/float64(in.MemoryLimitBytes))
	}
	return min(load, 1)
}

// RuntimeMemory returns the memory the Go runtime holds, as its memory limit counts it
// (all mapped memory less heap returned to the OS), and the limit in force, 0 when none
// is set.
func RuntimeMemory() (inUse, limit uint64) {
	s := []rtmetrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	rtmetrics.Read(s)
	if s[0].Value.Kind() == rtmetrics.KindUint64 && s[1].Value.Kind() == rtmetrics.KindUint64 {
		inUse = s[0].Value.Uint64() - s[1].Value.Uint64()
	}
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		limit = uint64(l)
	}
	return inUse, limit
}
