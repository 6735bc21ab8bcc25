package endpoint

import (
	"fmt"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

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

// newPrometheus returns a Prometheus registry of its own (never the client's default, so
// that an embedder's is left alone and two brokers in one process keep theirs apart)
// with the Go runtime, process and build collectors, bifrost_gc_cpu_fraction, and reg's
// series through an exporter.
func newPrometheus(reg *metrics.Registry) (*prometheus.Registry, error) {
	p := prometheus.NewRegistry()
	err := p.Register(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(runtimeMetrics...)))
	for _, c := range []prometheus.Collector{
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		newGCCPUCollector(),
		&exporter{reg: reg},
	} {
		if err != nil {
			break
		}
		err = p.Register(c)
	}
	if err != nil {
		return nil, fmt.Errorf("endpoint: register: %w", err)
	}
	return p, nil
}

// An exporter is a metrics.Registry as a Prometheus collector: at each scrape it turns
// the registry's series into constant metrics, and runs the Prometheus collectors the
// registry keeps (the cluster's). It describes nothing, which makes it an unchecked
// collector: the broker's parts register their collectors while it runs (the store's at
// Start, a bridge set's), and Gather still checks every family's help, type and labels
// and refuses a series reported twice.
type exporter struct {
	reg   *metrics.Registry
	descs sync.Map // *metrics.Desc → *prometheus.Desc; Descs are made once, with their collector
}

// Describe implements prometheus.Collector: nothing, see exporter.
func (e *exporter) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (e *exporter) Collect(ch chan<- prometheus.Metric) {
	e.reg.Collect(promWriter{e, ch})
	for _, c := range e.reg.Prometheus() {
		pc, ok := c.(prometheus.Collector)
		if !ok {
			ch <- prometheus.NewInvalidMetric(prometheus.NewDesc("bifrost_invalid_collector", "", nil, nil),
				fmt.Errorf("endpoint: %T is not a prometheus.Collector", c))
			continue
		}
		pc.Collect(ch)
	}
}

func (e *exporter) desc(d *metrics.Desc) *prometheus.Desc {
	if pd, ok := e.descs.Load(d); ok {
		return pd.(*prometheus.Desc)
	}
	pd, _ := e.descs.LoadOrStore(d, prometheus.NewDesc(d.Name, d.Help, d.Labels, nil))
	return pd.(*prometheus.Desc)
}

// promWriter sends what a metrics.Collector reports to a Prometheus collector's channel.
type promWriter struct {
	e  *exporter
	ch chan<- prometheus.Metric
}

func (w promWriter) Value(d *metrics.Desc, v float64, labelValues ...string) {
	t := prometheus.GaugeValue
	if d.Kind == metrics.KindCounter {
		t = prometheus.CounterValue
	}
	pd := w.e.desc(d)
	m, err := prometheus.NewConstMetric(pd, t, v, labelValues...)
	if err != nil {
		m = prometheus.NewInvalidMetric(pd, err)
	}
	w.ch <- m
}

func (w promWriter) Histogram(d *metrics.Desc, h metrics.HistogramValue, labelValues ...string) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Cumulative[i]
	}
	pd := w.e.desc(d)
	m, err := prometheus.NewConstHistogram(pd, h.Count, h.Sum, buckets, labelValues...)
	if err != nil {
		m = prometheus.NewInvalidMetric(pd, err)
	}
	w.ch <- m
}
