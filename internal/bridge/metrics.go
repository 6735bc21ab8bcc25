package bridge

import "github.com/prometheus/client_golang/prometheus"

// A collector exports every bridge's Stats, labelled bridge=<name>:
//
//	bifrost_bridge_up                  gauge: 1 while connected to the remote
//	bifrost_bridge_messages_total      counter, direction=in|out: messages carried
//	bifrost_bridge_dropped_total       counter, reason=queue_full|queue_full_qos0|expired|too_large
//	bifrost_bridge_queue_depth         gauge: messages queued or in flight for the remote
//	bifrost_bridge_queue_stored        gauge: of those, the messages kept in the store
//	bifrost_bridge_restored_total      counter: messages found in the store at start
//	bifrost_bridge_reconnects_total    counter: connections after the first
//	bifrost_bridge_resent_total        counter: messages sent again after a connection broke
type collector struct {
	s                                          *Set
	up, messages, dropped, depth, reconn, sent *prometheus.Desc
	stored, restored                           *prometheus.Desc
}

// Collector returns the bridges' Prometheus collector.
func (s *Set) Collector() prometheus.Collector {
	l := []string{"bridge"}
	return &collector{
		s:  s,
		up: prometheus.NewDesc("bifrost_bridge_up", "1 while the bridge is connected to its remote broker.", l, nil),
		messages: prometheus.NewDesc("bifrost_bridge_messages_total",
			"Messages carried by the bridge: in, from the remote published here; out, sent to the remote.",
			[]string{"bridge", "direction"}, nil),
		dropped: prometheus.NewDesc("bifrost_bridge_dropped_total",
			"Messages for the remote not sent: queue_full (a QoS 1 message, queue_messages or queue_bytes reached), "+
				"queue_full_qos0 (a QoS 0 message, the same), expired (message expiry ran out while queued), "+
				"too_large (above the remote's Maximum Packet Size).",
			[]string{"bridge", "reason"}, nil),
		depth: prometheus.NewDesc("bifrost_bridge_queue_depth", "Messages queued or in flight for the remote.", l, nil),
		reconn: prometheus.NewDesc("bifrost_bridge_reconnects_total",
			"Connections to the remote after the first one.", l, nil),
		sent: prometheus.NewDesc("bifrost_bridge_resent_total",
			"QoS 1 messages sent again (DUP) because a connection broke before their PUBACK.", l, nil),
		stored: prometheus.NewDesc("bifrost_bridge_queue_stored",
			"Messages queued or in flight for the remote that the store keeps (QoS 1, store on).", l, nil),
		restored: prometheus.NewDesc("bifrost_bridge_restored_total",
			"Messages for the remote found in the store at start and queued again.", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.messages, c.dropped, c.depth, c.reconn, c.sent, c.stored, c.restored} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, br := range c.s.bridges {
		st, n := br.Stats(), br.Name()
		up := 0.0
		if st.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, n)
		ch <- prometheus.MustNewConstMetric(c.messages, prometheus.CounterValue, float64(st.In), n, "in")
		ch <- prometheus.MustNewConstMetric(c.messages, prometheus.CounterValue, float64(st.Out), n, "out")
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped), n, "queue_full")
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.DroppedQoS0), n, "queue_full_qos0")
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Expired), n, "expired")
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.TooLarge), n, "too_large")
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(st.Depth), n)
		ch <- prometheus.MustNewConstMetric(c.reconn, prometheus.CounterValue, float64(st.Reconnects), n)
		ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(st.Resent), n)
		ch <- prometheus.MustNewConstMetric(c.stored, prometheus.GaugeValue, float64(st.Stored), n)
		ch <- prometheus.MustNewConstMetric(c.restored, prometheus.CounterValue, float64(st.Restored), n)
	}
}
