package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-peer figures of routes and forwarding, read at scrape time: the hot path only
// bumps the link's atomic counters.

var (
	descFwdMsgs = prometheus.NewDesc("bifrost_cluster_forwarded_messages_total",
		"Messages forwarded to a peer.", []string{"peer"}, nil)
	descFwdBytes = prometheus.NewDesc("bifrost_cluster_forwarded_bytes_total",
		"Bytes of topic, payload and properties forwarded to a peer.", []string{"peer"}, nil)
	descFwdBatches = prometheus.NewDesc("bifrost_cluster_forward_batches_total",
		"Batches sent to a peer: messages over batches is how well forwarding batches.", []string{"peer"}, nil)
	descFwdDrops = prometheus.NewDesc("bifrost_cluster_forward_dropped_total",
		"QoS 0 messages for a peer dropped because its queue was full.", []string{"peer"}, nil)
	descFwdQueue = prometheus.NewDesc("bifrost_cluster_forward_queue",
		"Messages queued for a peer or in flight to it.", []string{"peer"}, nil)
	descFwdRTT = prometheus.NewDesc("bifrost_cluster_forward_rtt_seconds",
		"The last round trip of a forwarded batch to a peer, from send to acknowledgement.", []string{"peer"}, nil)
	descRoutes = prometheus.NewDesc("bifrost_cluster_routes",
		"Routes (filters) a peer has in this node's remote index.", []string{"peer"}, nil)
	descLocalRoutes = prometheus.NewDesc("bifrost_cluster_local_routes",
		"Filters this node's sessions subscribe to, as streamed to the peers.", nil, nil)
	descRouteTimeouts = prometheus.NewDesc("bifrost_cluster_route_ack_timeouts_total",
		"SUBACKs sent without every live peer's acknowledgement, after waiting the route timeout.", nil, nil)
	descResent = prometheus.NewDesc("bifrost_cluster_forward_duplicates_total",
		"Forwarded messages a peer sent again after a reconnect, recognised and not delivered twice.", nil, nil)
	descSharedDropped = prometheus.NewDesc("bifrost_cluster_shared_dropped_total",
		"Shared-subscription messages no member took on any node.", nil, nil)
)

// routesCollector reads the figures of routes and forwarding.
type routesCollector struct{ c *Cluster }

func (routesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFwdMsgs, descFwdBytes, descFwdBatches, descFwdDrops, descFwdQueue, descFwdRTT,
		descRoutes, descLocalRoutes, descRouteTimeouts, descResent, descSharedDropped} {
		ch <- d
	}
}

func (k routesCollector) Collect(ch chan<- prometheus.Metric) {
	f, r := k.c.fwd, k.c.routes
	f.mu.Lock()
	links := make([]*fwdLink, 0, len(f.links))
	for _, l := range f.links {
		links = append(links, l)
	}
	f.mu.Unlock()
	for _, l := range links {
		ch <- prometheus.MustNewConstMetric(descFwdMsgs, prometheus.CounterValue, float64(l.msgs.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descFwdBytes, prometheus.CounterValue, float64(l.bytes.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descFwdBatches, prometheus.CounterValue, float64(l.batches.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descFwdDrops, prometheus.CounterValue, float64(l.drops.Load()), l.name)
		ch <- prometheus.MustNewConstMetric(descFwdQueue, prometheus.GaugeValue, float64(l.depth()), l.name)
		ch <- prometheus.MustNewConstMetric(descFwdRTT, prometheus.GaugeValue, time.Duration(l.rtt.Load()).Seconds(), l.name)
	}
	for peer, n := range r.peerRoutes() {
		ch <- prometheus.MustNewConstMetric(descRoutes, prometheus.GaugeValue, float64(n), peer)
	}
	ch <- prometheus.MustNewConstMetric(descLocalRoutes, prometheus.GaugeValue, float64(r.localRoutes()))
	r.mu.Lock()
	timeouts := r.timeouts
	r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descRouteTimeouts, prometheus.CounterValue, float64(timeouts))
	ch <- prometheus.MustNewConstMetric(descResent, prometheus.CounterValue, float64(f.resent.Load()))
	ch <- prometheus.MustNewConstMetric(descSharedDropped, prometheus.CounterValue, float64(f.dropped.Load()))
}
