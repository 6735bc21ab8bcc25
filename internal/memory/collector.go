package memory

import "github.com/prometheus/client_golang/prometheus"

// collector exports the policy's own series. What the metrics registry's runtime and
// process collectors already export is not repeated:
//
//	the limit in force     go_gc_gomemlimit_bytes
//	the GC percent         go_gc_gogc_percent
//	GC cycles              go_gc_cycles_total_gc_cycles_total
//	live heap, heap goal   go_gc_heap_live_bytes, go_gc_heap_goal_bytes
//	RSS                    process_resident_memory_bytes
//	GC CPU share           bifrost_gc_cpu_fraction
type collector struct {
	p             *Policy
	pressure      *prometheus.Desc
	used          *prometheus.Desc
	hard          *prometheus.Desc
	returned      *prometheus.Desc
	returnedBytes *prometheus.Desc
}

// Collector returns a prometheus.Collector of the policy's series, for the caller to
// register (metrics.Registry.Register):
//
//	bifrost_memory_pressure              gauge: 0 none, 1 soft, 2 hard
//	bifrost_memory_used_bytes            gauge: what pressure compares with the limit
//	bifrost_memory_hard_seconds_total    counter: time spent at hard
//	bifrost_memory_returned_total        counter: debug.FreeOSMemory calls
//	bifrost_memory_returned_bytes_total  counter: RSS those calls gave back
//
// Collecting reads atomics only.
func (p *Policy) Collector() prometheus.Collector {
	return &collector{
		p: p,
		pressure: prometheus.NewDesc("bifrost_memory_pressure",
			"Memory pressure level admission control acts on: 0 none, 1 soft (refuse connections, shed QoS 0), 2 hard (also stop reading from connections that publish).",
			nil, nil),
		used: prometheus.NewDesc("bifrost_memory_used_bytes",
			"Memory the kernel charges (in a cgroup: its usage less page cache; else the anonymous RSS) less the heap the next GC frees; pressure compares it with go_gc_gomemlimit_bytes.",
			nil, nil),
		hard: prometheus.NewDesc("bifrost_memory_hard_seconds_total",
			"Time spent at hard memory pressure, reading paused on publishing connections.",
			nil, nil),
		returned: prometheus.NewDesc("bifrost_memory_returned_total",
			"Times the return-to-OS policy forced memory back to the OS (debug.FreeOSMemory).",
			nil, nil),
		returnedBytes: prometheus.NewDesc("bifrost_memory_returned_bytes_total",
			"Resident memory given back to the OS by the return-to-OS policy.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pressure
	ch <- c.used
	ch <- c.hard
	ch <- c.returned
	ch <- c.returnedBytes
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	ch <- prometheus.MustNewConstMetric(c.pressure, prometheus.GaugeValue, float64(p.Pressure()))
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(p.press.used.Load()))
	ch <- prometheus.MustNewConstMetric(c.hard, prometheus.CounterValue, p.HardTime().Seconds())
	ch <- prometheus.MustNewConstMetric(c.returned, prometheus.CounterValue, float64(p.returned.Load()))
	ch <- prometheus.MustNewConstMetric(c.returnedBytes, prometheus.CounterValue, float64(p.retBytes.Load()))
}
