package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Retained messages' series, read at scrape time from the retainer's counters (kept under
// its lock, which every change takes anyway).

var (
	descRetainedChanges = prometheus.NewDesc("bifrost_cluster_retained_changes_total",
		"Retained changes this node handed to the Raft log (set, clear, and the leader's expiry removals), "+
			"the entries that carried them, the changes the log did not take (no leader in time), "+
			"the empty entries a follower appended to learn of a commit at once (nudges), "+
			"and the QoS 0 changes dropped because the queue to the log was full (dropped).", []string{"what"}, nil)
	descRetainedSet = prometheus.NewDesc("bifrost_cluster_retained_topics",
		"Topics in the replicated retained set (every node holds the whole set).", nil, nil)
)

type retainedCollector struct{ c *Cluster }

func (retainedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRetainedChanges
	ch <- descRetainedSet
}

func (k retainedCollector) Collect(ch chan<- prometheus.Metric) {
	r := &k.c.ret
	r.mu.Lock()
	changes, entries, failed, nudges, dropped := r.next, r.entries, r.failed, r.nudges, r.dropped
	r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descRetainedChanges, prometheus.CounterValue, float64(changes), "changes")
	ch <- prometheus.MustNewConstMetric(descRetainedChanges, prometheus.CounterValue, float64(entries), "entries")
	ch <- prometheus.MustNewConstMetric(descRetainedChanges, prometheus.CounterValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(descRetainedChanges, prometheus.CounterValue, float64(nudges), "nudges")
	ch <- prometheus.MustNewConstMetric(descRetainedChanges, prometheus.CounterValue, float64(dropped), "dropped")
	ch <- prometheus.MustNewConstMetric(descRetainedSet, prometheus.GaugeValue, float64(k.c.fsm.RetainedLen()))
}
