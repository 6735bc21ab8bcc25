package cluster

import (
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// The cluster's series on the broker's registry. Raft's and membership's figures are read
// at scrape time (a collector), so nothing is counted on any hot path; only Apply's
// latency is observed as it happens.

type clusterMetrics struct {
	apply *prometheus.HistogramVec // by via: leader, forwarded
}

var (
	descRaftState = prometheus.NewDesc("bifrost_cluster_raft_state",
		"1 for this node's Raft state (follower, candidate, leader, shutdown), 0 for the others.", []string{"state"}, nil)
	descTerm = prometheus.NewDesc("bifrost_cluster_raft_term", "This node's current Raft term.", nil, nil)
	descLast = prometheus.NewDesc("bifrost_cluster_raft_last_index",
		"Index of the last entry in this node's Raft log (or snapshot).", nil, nil)
	descCommit = prometheus.NewDesc("bifrost_cluster_raft_commit_index",
		"Index of the last Raft entry this node knows to be committed.", nil, nil)
	descApplied = prometheus.NewDesc("bifrost_cluster_raft_applied_index",
		"Index of the last Raft entry this node applied to its state.", nil, nil)
	descMembers = prometheus.NewDesc("bifrost_cluster_members",
		"Members this node knows, by state (alive, suspect, leaving, dead, left).", []string{"state"}, nil)
	descMemberLoad = prometheus.NewDesc("bifrost_cluster_member_load",
		"Each live member's load figure as it last told the others (0 to 1).", []string{"node"}, nil)
	descRefused = prometheus.NewDesc("bifrost_cluster_refused_total",
		"Peers refused: at gossip (another cluster, unreadable metadata, gossip that our secret does not decrypt) or at the rpc port (no secret).", []string{"at"}, nil)
)

// registerMetrics registers c's collector and Apply's histogram on reg.
func registerMetrics(reg *metrics.Registry, c *Cluster) (*clusterMetrics, error) {
	m := &clusterMetrics{
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bifrost_cluster_apply_seconds",
			Help: "Time from Apply to the leader having applied the command, by where it was appended (leader, forwarded).",
			// 100µs (a leader on fast disks) to 5s (an election in between).
			Buckets: prometheus.ExponentialBuckets(100e-6, 2.5, 12),
		}, []string{"via"}),
	}
	if err := reg.RegisterPrometheus(m.apply); err != nil {
		return nil, err
	}
	if err := reg.RegisterPrometheus(collector{c}); err != nil {
		return nil, err
	}
	return m, nil
}

// collector reads Raft's and membership's figures at scrape time.
type collector struct{ c *Cluster }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descTerm, descLast, descCommit, descApplied, descMembers, descMemberLoad, descRefused} {
		ch <- d
	}
}

func (k collector) Collect(ch chan<- prometheus.Metric) {
	r := k.c.raft
	state := r.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, lower(s.String()))
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(r.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, float64(r.LastIndex()))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(r.CommitIndex()))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(r.AppliedIndex()))
	counts := map[string]int{"alive": 0, "suspect": 0, "leaving": 0, "dead": 0, "left": 0}
	for _, m := range k.c.Members() {
		state := m.State
		if state == "alive" && m.Meta.Leaving {
			state = "leaving"
		}
		counts[state]++
		if state != "dead" && state != "left" {
			ch <- prometheus.MustNewConstMetric(descMemberLoad, prometheus.GaugeValue, m.Meta.Load, m.Name)
		}
	}
	for s, n := range counts {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), s)
	}
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(k.c.ms.refusalCount()), "gossip")
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(k.c.mux.refused.Load()), "rpc")
}

func lower(s string) string {
	b := []byte(s)
	if len(b) > 0 && b[0] >= 'A' && b[0] <= 'Z' {
		b[0] += 'a' - 'A'
	}
	return string(b)
}
