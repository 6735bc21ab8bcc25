package cluster

import (
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Client-id ownership's series, read at scrape time from counters the claim path bumps
// once per claim (atomics; the broker's per-packet path counts nothing here).

// ownerCounts are ownership's counters.
type ownerCounts struct {
	claims     atomic.Uint64 // claims applied for this node
	foreign    atomic.Uint64 // claims of this node refused: another identity owns the id
	entries    atomic.Uint64 // claims entries this node applied for itself
	handed     atomic.Uint64 // hand-overs that brought a session
	handedNone atomic.Uint64 // hand-overs of a previous owner that had none (or a clean start)
	lost       atomic.Uint64 // claims whose previous owner could not be asked: its session lost
	fenced     atomic.Uint64 // client ids claimed by other nodes, told to the broker
	selfFenced atomic.Uint64 // times this node fenced itself
}

var (
	descClaims = prometheus.NewDesc("bifrost_cluster_claims_total",
		"Client ids this node claimed (one per CONNECT), the Raft entries that carried them, and the claims "+
			"refused because another identity owns the id (foreign_session: refuse).", []string{"what"}, nil)
	descHandovers = prometheus.NewDesc("bifrost_cluster_handovers_total",
		"Claims of a client id another node owned, by outcome: its session came (session), it had none "+
			"(none), or the node could not be asked and its session is lost (lost).", []string{"outcome"}, nil)
	descFenced = prometheus.NewDesc("bifrost_cluster_fenced_total",
		"Client ids claimed by other nodes (this node closes its connection of each, if any).", nil, nil)
	descSelfFenced = prometheus.NewDesc("bifrost_cluster_self_fenced_total",
		"Times this node lost the Raft leader for the lease and closed every client connection.", nil, nil)
	descServing = prometheus.NewDesc("bifrost_cluster_serving",
		"1 while this node holds the lease to serve clients, 0 while it is fenced.", nil, nil)
	descOwners = prometheus.NewDesc("bifrost_cluster_owned_client_ids",
		"Entries of the client-id ownership table (every node holds the whole table).", nil, nil)
)

// registerOwnerMetrics registers ownership's collector on reg.
func registerOwnerMetrics(reg *metrics.Registry, c *Cluster) error {
	return reg.RegisterPrometheus(ownerCollector{c})
}

type ownerCollector struct{ c *Cluster }

func (ownerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClaims, descHandovers, descFenced, descSelfFenced, descServing, descOwners} {
		ch <- d
	}
}

func (k ownerCollector) Collect(ch chan<- prometheus.Metric) {
	n := &k.c.own.counts
	counter := func(d *prometheus.Desc, v *atomic.Uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v.Load()), labels...)
	}
	counter(descClaims, &n.claims, "client_ids")
	counter(descClaims, &n.entries, "entries")
	counter(descClaims, &n.foreign, "refused_foreign")
	counter(descHandovers, &n.handed, "session")
	counter(descHandovers, &n.handedNone, "none")
	counter(descHandovers, &n.lost, "lost")
	counter(descFenced, &n.fenced)
	counter(descSelfFenced, &n.selfFenced)
	serving := 0.0
	if k.c.ServingAt(time.Now().UnixNano()) {
		serving = 1
	}
	ch <- prometheus.MustNewConstMetric(descServing, prometheus.GaugeValue, serving)
	if k.c.fsm != nil {
		ch <- prometheus.MustNewConstMetric(descOwners, prometheus.GaugeValue, float64(k.c.fsm.Owners()))
	}
}
