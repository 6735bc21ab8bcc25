// Package metrics holds the broker's own series (bifrost_*) and the load figure, in
// atomics and small collectors of its own: no Prometheus client, no HTTP. The operator
// endpoint (internal/endpoint, linked only into programs that import
// github.com/bifrost-mqtt/bifrost/endpoint) exports a Registry in Prometheus's format
// beside the Go runtime's and the process's series; a program that embeds bifrost
// without it pays an atomic add per count and nothing else (docs/edge.md, "Embedding").
//
// The registry is per Broker, so that two brokers embedded in one process (as in tests)
// keep separate counts.
//
// # Hot path
//
// Counting a message must cost an atomic add, nothing more. Resolving a labelled child
// (WithLabelValues) takes a lock, so callers resolve each child once (when a listener
// starts, when a session is created) and keep it; on the hot path they only call Inc or
// Add on the cached *Counter or *Gauge. Series whose label values are fixed (QoS) are
// resolved here already, as arrays indexed by the value.
package metrics

import (
	"fmt"
	"strconv"
	"sync"
)

// A Registry holds the broker's series and the collectors of its other parts. Its
// exported series are safe for concurrent use; the fields are set by New and never
// reassigned.
type Registry struct {
	load  func() LoadInput
	nodes func() []NodeLoad // the cluster's nodes for /load; nil on a single node

	mu         sync.Mutex
	collectors []Collector
	names      map[string]bool // the families registered
	prometheus []any           // the cluster's collectors (RegisterPrometheus)

	// ConnectionsCurrent is the number of open MQTT connections per listener name.
	ConnectionsCurrent *GaugeVec
	// ConnectionsTotal counts accepted MQTT connections per listener name.
	ConnectionsTotal *CounterVec
	// MessagesReceived counts PUBLISH packets received from clients, indexed by QoS.
	MessagesReceived [3]*Counter
	// MessagesSent counts PUBLISH packets sent to clients, indexed by QoS.
	MessagesSent [3]*Counter
	// MessagesDropped counts messages not delivered, by reason (queue full, QoS 0 shed,
	// expired ...): every drop the broker decides is counted here.
	MessagesDropped *CounterVec
	// BytesReceived counts bytes read from MQTT connections.
	BytesReceived *Counter
	// BytesSent counts bytes written to MQTT connections.
	BytesSent *Counter
	// Subscriptions is the number of subscriptions in the topic index.
	Subscriptions *Gauge
	// RetainedMessages is the number of retained messages held.
	RetainedMessages *Gauge
	// ConnectsRefused counts CONNECTs refused, by reason (bad credentials, not
	// authorized, server busy, a limit): what an operator watches for attacks and
	// misconfigured clients.
	ConnectsRefused *CounterVec
	// Denied counts operations the ACL or a limit refused, by action (publish,
	// subscribe, will, deliver, max_subscriptions, publish_rate).
	Denied *CounterVec
	// AuthFailures counts failed password checks (and enhanced authentications): what
	// the failure budget of each source (limits.auth_failures) counts.
	AuthFailures *Counter
	// AuthThrottled counts CONNECTs and AUTH steps refused without a check, their
	// source over its failure budget.
	AuthThrottled *Counter
}

// New returns a Registry with the broker's series registered. load supplies the inputs
// of the load figure at scrape time (bifrost_load and /load); it must be safe for
// concurrent use and cheap. A nil load reports zero load.
func New(load func() LoadInput) *Registry {
	if load == nil {
		load = func() LoadInput { return LoadInput{} }
	}
	r := &Registry{
		load:               load,
		names:              map[string]bool{},
		ConnectionsCurrent: NewGaugeVec("bifrost_connections_current", "Open MQTT connections.", "listener"),
		ConnectionsTotal:   NewCounterVec("bifrost_connections_total", "MQTT connections accepted.", "listener"),
		MessagesDropped:    NewCounterVec("bifrost_messages_dropped_total", "Messages not delivered, by reason.", "reason"),
		ConnectsRefused:    NewCounterVec("bifrost_connects_refused_total", "CONNECTs refused, by reason.", "reason"),
		Denied:             NewCounterVec("bifrost_denied_total", "Operations refused by the ACL or a limit, by action.", "action"),
	}
	received := NewCounterVec("bifrost_messages_received_total", "PUBLISH packets received from clients, by QoS.", "qos")
	sent := NewCounterVec("bifrost_messages_sent_total", "PUBLISH packets sent to clients, by QoS.", "qos")
	for qos := range 3 {
		r.MessagesReceived[qos] = received.WithLabelValues(strconv.Itoa(qos))
		r.MessagesSent[qos] = sent.WithLabelValues(strconv.Itoa(qos))
	}
	// Families of one series without labels: the series exists, at 0, from the start.
	bytesRecv := NewCounterVec("bifrost_bytes_received_total", "Bytes read from MQTT connections.")
	bytesSent := NewCounterVec("bifrost_bytes_sent_total", "Bytes written to MQTT connections.")
	subs := NewGaugeVec("bifrost_subscriptions_current", "Subscriptions in the topic index.")
	retained := NewGaugeVec("bifrost_retained_messages_current", "Retained messages held.")
	r.BytesReceived, r.BytesSent = bytesRecv.WithLabelValues(), bytesSent.WithLabelValues()
	r.Subscriptions, r.RetainedMessages = subs.WithLabelValues(), retained.WithLabelValues()
	authFailures := NewCounterVec("bifrost_auth_failures_total", "Failed password checks and enhanced authentications.")
	authThrottled := NewCounterVec("bifrost_auth_throttled_total",
		"CONNECTs and AUTH steps refused unchecked, their source over its failure budget (limits.auth_failures).")
	r.AuthFailures, r.AuthThrottled = authFailures.WithLabelValues(), authThrottled.WithLabelValues()
	loadGauge := NewGaugeFunc("bifrost_load", "Load from 0 (idle) to 1 (full): the most used of connections and memory.",
		func() float64 { return r.Load().Load })

	for _, c := range []Collector{loadGauge, r.ConnectionsCurrent, r.ConnectionsTotal, received, sent,
		r.MessagesDropped, bytesRecv, bytesSent, subs, retained, r.ConnectsRefused, r.Denied, authFailures, authThrottled} {
		if err := r.Register(c); err != nil {
			panic(err) // the names above are distinct
		}
	}
	return r
}

// Register adds a collector of another part of the broker. A family name registered
// before is refused.
func (r *Registry) Register(c Collector) error {
	descs := c.Describe()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range descs {
		if r.names[d.Name] {
			return fmt.Errorf("metrics: register: %s registered twice", d.Name)
		}
	}
	for _, d := range descs {
		r.names[d.Name] = true
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// RegisterPrometheus keeps c, a collector of the Prometheus client
// (prometheus.Collector), for the HTTP endpoint to export beside the Registry's own. The
// cluster's series are such collectors: the cluster links the Prometheus client anyway,
// and this package does not. A program without the endpoint keeps c unread.
func (r *Registry) RegisterPrometheus(c any) error {
	if c == nil {
		return fmt.Errorf("metrics: register: nil collector")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prometheus = append(r.prometheus, c)
	return nil
}

// Prometheus returns the collectors RegisterPrometheus kept.
func (r *Registry) Prometheus() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.prometheus...)
}

// Collect reports every registered collector's series to w.
func (r *Registry) Collect(w Writer) {
	r.mu.Lock()
	cs := append([]Collector(nil), r.collectors...)
	r.mu.Unlock()
	for _, c := range cs {
		c.Collect(w)
	}
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

// Report is the body of GET /load: the load figure, and on a cluster node every node.
func (r *Registry) Report() LoadReport {
	rep := r.Load()
	if r.nodes != nil {
		rep.Nodes = r.nodes()
	}
	return rep
}
