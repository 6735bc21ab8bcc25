package broker

import (
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// tlsCollector exports the listeners' TLS handshake gate (limits.max_tls_handshakes):
//
//	bifrost_tls_handshakes_running        gauge: handshakes in progress, each on a goroutine
//	bifrost_tls_handshakes_waiting        gauge: connections waiting for a handshake slot
//	bifrost_tls_handshakes_refused_total  counter: connections closed because every slot
//	                                      was taken and the queue full
//
// Collecting takes the gate's lock once.
type tlsCollector struct {
	net                       *listener.Server
	running, waiting, refused *metrics.Desc
}

func newTLSCollector(net *listener.Server) *tlsCollector {
	return &tlsCollector{
		net: net,
		running: metrics.NewDesc(metrics.KindGauge, "bifrost_tls_handshakes_running",
			"TLS handshakes in progress (tls and wss listeners), at most limits.max_tls_handshakes."),
		waiting: metrics.NewDesc(metrics.KindGauge, "bifrost_tls_handshakes_waiting",
			"Connections whose ClientHello came while every handshake slot was taken, waiting for one."),
		refused: metrics.NewDesc(metrics.KindCounter, "bifrost_tls_handshakes_refused_total",
			"Connections closed before their TLS handshake because every slot was taken and the queue full."),
	}
}

// Describe implements metrics.Collector.
func (c *tlsCollector) Describe() []*metrics.Desc {
	return []*metrics.Desc{c.running, c.waiting, c.refused}
}

// Collect implements metrics.Collector.
func (c *tlsCollector) Collect(w metrics.Writer) {
	running, waiting, refused := c.net.TLSHandshakes()
	w.Value(c.running, float64(running))
	w.Value(c.waiting, float64(waiting))
	w.Value(c.refused, float64(refused))
}
