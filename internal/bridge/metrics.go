package bridge

import "github.com/bifrost-mqtt/bifrost/internal/metrics"

// A collector exports every bridge's Stats, labelled bridge=<name>:
//
//	bifrost_bridge_up                  gauge: 1 while connected to the remote
//	bifrost_bridge_messages_total      counter, direction=in|out: messages carried
//	bifrost_bridge_dropped_total       counter, reason=queue_full|queue_full_qos0|expired|too_large
//	bifrost_bridge_queue_depth         gauge: messages queued or in flight for the remote
//	bifrost_bridge_queue_stored        gauge: of those, the ones the store keeps
//	bifrost_bridge_reconnects_total    counter: connections after the first
//	bifrost_bridge_resent_total        counter: messages sent again after a connection broke
//	bifrost_bridge_restored_total      counter: messages taken back from the store at start
type collector struct {
	s                                          *Set
	up, messages, dropped, depth, reconn, sent *metrics.Desc
	stored, restored                           *metrics.Desc
}

// Collector returns the bridges' collector of series.
func (s *Set) Collector() metrics.Collector {
	return &collector{
		s:  s,
		up: metrics.NewDesc(metrics.KindGauge, "bifrost_bridge_up", "1 while the bridge is connected to its remote broker.", "bridge"),
		messages: metrics.NewDesc(metrics.KindCounter, "bifrost_bridge_messages_total",
			"Messages carried by the bridge: in, from the remote published here; out, sent to the remote.",
			"bridge", "direction"),
		dropped: metrics.NewDesc(metrics.KindCounter, "bifrost_bridge_dropped_total",
			"Messages for the remote not sent: queue_full (a QoS 1 message, queue_messages or queue_bytes reached), "+
				"queue_full_qos0 (a QoS 0 message, the same), expired (message expiry ran out while queued), "+
				"too_large (above the remote's Maximum Packet Size).",
			"bridge", "reason"),
		depth: metrics.NewDesc(metrics.KindGauge, "bifrost_bridge_queue_depth", "Messages queued or in flight for the remote.", "bridge"),
		reconn: metrics.NewDesc(metrics.KindCounter, "bifrost_bridge_reconnects_total",
			"Connections to the remote after the first one.", "bridge"),
		sent: metrics.NewDesc(metrics.KindCounter, "bifrost_bridge_resent_total",
			"QoS 1 messages sent again (DUP) because a connection broke before their PUBACK.", "bridge"),
		stored: metrics.NewDesc(metrics.KindGauge, "bifrost_bridge_queue_stored",
			"Messages queued or in flight for the remote that the store keeps (QoS 1, store on).", "bridge"),
		restored: metrics.NewDesc(metrics.KindCounter, "bifrost_bridge_restored_total",
			"Messages for the remote found in the store at start and queued again.", "bridge"),
	}
}

// Describe implements metrics.Collector.
func (c *collector) Describe() []*metrics.Desc {
	return []*metrics.Desc{c.up, c.messages, c.dropped, c.depth, c.reconn, c.sent, c.stored, c.restored}
}

// Collect implements metrics.Collector.
func (c *collector) Collect(w metrics.Writer) {
	for _, br := range c.s.bridges {
		st, n := br.Stats(), br.Name()
		up := 0.0
		if st.Up {
			up = 1
		}
		w.Value(c.up, up, n)
		w.Value(c.messages, float64(st.In), n, "in")
		w.Value(c.messages, float64(st.Out), n, "out")
		w.Value(c.dropped, float64(st.Dropped), n, "queue_full")
		w.Value(c.dropped, float64(st.DroppedQoS0), n, "queue_full_qos0")
		w.Value(c.dropped, float64(st.Expired), n, "expired")
		w.Value(c.dropped, float64(st.TooLarge), n, "too_large")
		w.Value(c.depth, float64(st.Depth), n)
		w.Value(c.reconn, float64(st.Reconnects), n)
		w.Value(c.sent, float64(st.Resent), n)
		w.Value(c.stored, float64(st.Stored), n)
		w.Value(c.restored, float64(st.Restored), n)
	}
}
