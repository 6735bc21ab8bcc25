// Package metrics is bifrost's observability surface: a Prometheus registry with the Go
// runtime and process collectors and the broker's own series, the load figure a load
// balancer reads, and the operator HTTP endpoint that serves them with pprof and health.
//
// Every series of our own is named bifrost_*. The registry is per Broker, never the
// prometheus default, so that two brokers embedded in one process (as in tests) keep
// separate counts and an embedder's own default registry is left alone.
//
// # Hot path
//
// Counting a message must cost an atomic add, nothing more. Resolving a labelled child
// (WithLabelValues) hashes the labels and takes a lock, so callers resolve each child once
// (when a listener starts, when a session is created) and keep it; on the hot path they
// only call Inc or Add on the cached prometheus.Counter or prometheus.Gauge. Series whose
// label values are fixed (QoS) are resolved here already, as arrays indexed by the value.
package metrics

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// A Registry holds the broker's metrics and the runtime collectors, and gathers them for
// the HTTP endpoint. Its exported series are safe for concurrent use; the fields are set
// by New and never reassigned.
type Registry struct {
	reg   *prometheus.Registry
	load  func() LoadInput
	nodes func() []NodeLoad // the cluster's nodes for /load; nil on a single node

	// ConnectionsCurrent is the number of open MQTT connections per listener name.
	ConnectionsCurrent *prometheus.GaugeVec
	// ConnectionsTotal counts accepted MQTT connections per listener name.
	ConnectionsTotal *prometheus.CounterVec
	// MessagesReceived counts PUBLISH packets received from clients, indexed by QoS.
	MessagesReceived [3]prometheus.Counter
	// MessagesSent counts PUBLISH packets sent to clients, indexed by QoS.
	MessagesSent [3]prometheus.Counter
	// MessagesDropped counts messages not delivered, by reason (queue full, QoS 0 shed,
	// expired ...): every drop the broker decides is counted here.
	MessagesDropped *prometheus.CounterVec
	// BytesReceived counts bytes read from MQTT connections.
	BytesReceived prometheus.Counter
	// BytesSent counts bytes written to MQTT connections.
	BytesSent prometheus.Counter
	// Subscriptions is the number of subscriptions in the topic index.
	Subscriptions prometheus.Gauge
	// RetainedMessages is the number of retained messages held.
	RetainedMessages prometheus.Gauge
	// ConnectsRefused counts CONNECTs refused, by reason (bad credentials, not
	// authorized, server busy, a limit): what an operator watches for attacks and
	// misconfigured clients.
	ConnectsRefused *prometheus.CounterVec
	// Denied counts operations the ACL or a limit refused, by action (publish,
	// subscribe, will, deliver, max_subscriptions, publish_rate).
	Denied *prometheus.CounterVec
}

// runtimeMetrics selects the runtime/metrics series the Go collector exports, besides the
// go_memstats_* it derives from them: GC (cycles, heap goal, pauses), memory classes,
// scheduler latencies and the CPU classes behind bifrost_gc_cpu_fraction. Left out is
// /godebug/, one counter per non-default GODEBUG setting, which operators do not chart.
var runtimeMetrics = []collectors.GoRuntimeMetricsRule{
	collectors.MetricsGC,
	collectors.MetricsMemory,
	collectors.MetricsScheduler,
	{Matcher: regexp.MustCompile(`^/cpu/classes/`)},
}

// New returns a Registry with the runtime, process and broker collectors registered.
// load supplies the inputs of the load figure at scrape time (bifrost_load and /load);
// it must be safe for concurrent use and cheap. A nil load reports zero load.
func New(load func() LoadInput) *Registry {
	if load == nil {
		load = func() LoadInput { return LoadInput{} }
	}
	r := &Registry{
		reg:  prometheus.NewRegistry(),
		load: load,
		ConnectionsCurrent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bifrost_connections_current",
			Help: "Open MQTT connections.",
		}, []string{"listener"}),
		ConnectionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bifrost_connections_total",
			Help: "MQTT connections accepted.",
		}, []string{"listener"}),
		MessagesDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bifrost_messages_dropped_total",
			Help: "Messages not delivered, by reason.",
		}, []string{"reason"}),
		BytesReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bifrost_bytes_received_total",
			Help: "Bytes read from MQTT connections.",
		}),
		BytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bifrost_bytes_sent_total",
			Help: "Bytes written to MQTT connections.",
		}),
		Subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bifrost_subscriptions_current",
			Help: "Subscriptions in the topic index.",
		}),
		RetainedMessages: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bifrost_retained_messages_current",
			Help: "Retained messages held.",
		}),
		ConnectsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bifrost_connects_refused_total",
			Help: "CONNECTs refused, by reason.",
		}, []string{"reason"}),
		Denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bifrost_denied_total",
			Help: "Operations refused by the ACL or a limit, by action.",
		}, []string{"action"}),
	}
	received := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bifrost_messages_received_total",
		Help: "PUBLISH packets received from clients, by QoS.",
	}, []string{"qos"})
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bifrost_messages_sent_total",
		Help: "PUBLISH packets sent to clients, by QoS.",
	}, []string{"qos"})
	for qos := range 3 {
		r.MessagesReceived[qos] = received.WithLabelValues(strconv.Itoa(qos))
		r.MessagesSent[qos] = sent.WithLabelValues(strconv.Itoa(qos))
	}
	loadGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bifrost_load",
		Help: "Load from 0 (idle) to 1 (full): the most used of connections and memory.",
	}, func() float64 { return r.Load().Load })

	r.reg.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(runtimeMetrics...)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		newGCCPUCollector(),
		loadGauge,
		r.ConnectionsCurrent, r.ConnectionsTotal, received, sent, r.MessagesDropped,
		r.BytesReceived, r.BytesSent, r.Subscriptions, r.RetainedMessages,
		r.ConnectsRefused, r.Denied,
	)
	return r
}

// Register adds a collector of another part of the broker to the registry.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

// Load returns the current load figure with the inputs it was computed from.
func (r *Registry) Load() LoadReport {
	in := r.load()
	return LoadReport{Load: Load(in), LoadInput: in}
}

// SetNodes makes /load list the nodes of the cluster this one is part of, as nodes
// returns them. Call it before the HTTP endpoint serves.
func (r *Registry) SetNodes(nodes func() []NodeLoad) { r.nodes = nodes }

// Nodes returns the cluster's nodes as SetNodes's function gives them; nil on a single
// node.
func (r *Registry) Nodes() []NodeLoad {
	if r.nodes == nil {
		return nil
	}
	return r.nodes()
}

// report is the body of GET /load.
func (r *Registry) report() LoadReport {
	rep := r.Load()
	if r.nodes != nil {
		rep.Nodes = r.nodes()
	}
	return rep
}
