package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bifrost-mqtt/bifrost/internal/listener"
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
	running, waiting, refused *prometheus.Desc
}

func newTLSCollector(net *listener.Server) *tlsCollector {
	return &tlsCollector{
		net: net,
		running: prometheus.NewDesc("bifrost_tls_handshakes_running",
			"TLS handshakes in progress (tls and wss listeners), at most limits.max_tls_handshakes.", nil, nil),
		waiting: prometheus.NewDesc("bifrost_tls_handshakes_waiting",
			"Connections whose ClientHello came while every handshake slot was taken, waiting for one.", nil, nil),
		refused: prometheus.NewDesc("bifrost_tls_handshakes_refused_total",
			"Connections closed before their TLS handshake because every slot was taken and the queue full.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *tlsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.waiting
	ch <- c.refused
}

// Collect implements prometheus.Collector.
func (c *tlsCollector) Collect(ch chan<- prometheus.Metric) {
	running, waiting, refused := c.net.TLSHandshakes()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(running))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(waiting))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(refused))
}
