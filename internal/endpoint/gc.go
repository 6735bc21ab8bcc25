package endpoint

import (
	rtmetrics "runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// gcCPUCollector exports bifrost_gc_cpu_fraction: the share of the process's CPU time the
// GC has taken since start, read from runtime/metrics at scrape time. It is the figure the
// memory policy is tuned against (a storm of mark assists shows here first).
//
// Both inputs are the runtime's own estimates, refreshed at each GC cycle, and only
// comparable with each other, which is all a fraction needs. For the share over a recent
// window, chart rate(go_cpu_classes_gc_total_cpu_seconds_total) over
// rate(go_cpu_classes_total_cpu_seconds_total) instead; a stateless scrape-time figure
// cannot know the window of each scraper.
type gcCPUCollector struct {
	desc *prometheus.Desc
}

const (
	gcCPUMetric    = "/cpu/classes/gc/total:cpu-seconds"
	totalCPUMetric = "/cpu/classes/total:cpu-seconds"
)

func newGCCPUCollector() *gcCPUCollector {
	return &gcCPUCollector{desc: prometheus.NewDesc(
		"bifrost_gc_cpu_fraction",
		"Share of the process's CPU time spent in GC since start (0..1), estimated by the Go runtime.",
		nil, nil,
	)}
}

// Describe implements prometheus.Collector.
func (c *gcCPUCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *gcCPUCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, gcCPUFraction())
}

// gcCPUFraction reads the GC's share of CPU time since start; 0 before any is measured.
func gcCPUFraction() float64 {
	s := []rtmetrics.Sample{{Name: gcCPUMetric}, {Name: totalCPUMetric}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindFloat64 || s[1].Value.Kind() != rtmetrics.KindFloat64 {
		return 0 // not supported by this runtime
	}
	gc, total := s[0].Value.Float64(), s[1].Value.Float64()
	if total <= 0 {
		return 0
	}
	return min(max(gc/total, 0), 1)
}
