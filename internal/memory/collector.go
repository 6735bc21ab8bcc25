package memory

import "github.com/bifrost-mqtt/bifrost/internal/metrics"

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
	pressure      *metrics.Desc
	used          *metrics.Desc
	hard          *metrics.Desc
	returned      *metrics.Desc
	returnedBytes *metrics.Desc
}

// Collector returns a metrics.Collector of the policy's series, for the caller to
// register (metrics.Registry.Register):
//
//	bifrost_memory_pressure              gauge: 0 none, 1 soft, 2 hard
//	bifrost_memory_used_bytes            gauge: what pressure compares with the limit
//	bifrost_memory_hard_seconds_total    counter: time spent at hard
//	bifrost_memory_returned_total        counter: debug.FreeOSMemory calls
//	bifrost_memory_returned_bytes_total  counter: RSS those calls gave back
//
// Collecting reads atomics only.
func (p *Policy) Collector() metrics.Collector {
	return &collector{
		p: p,
		pressure: metrics.NewDesc(metrics.KindGauge, "bifrost_memory_pressure",
			"Memory pressure level admission control acts on: 0 none, 1 soft (refuse connections, shed QoS 0), 2 hard (also stop reading from connections that publish)."),
		used: metrics.NewDesc(metrics.KindGauge, "bifrost_memory_used_bytes",
			"Memory the kernel charges (in a cgroup: its usage less page cache; else the anonymous RSS) less the heap the next GC frees; pressure compares it with go_gc_gomemlimit_bytes."),
		hard: metrics.NewDesc(metrics.KindCounter, "bifrost_memory_hard_seconds_total",
			"Time spent at hard memory pressure, reading paused on publishing connections."),
		returned: metrics.NewDesc(metrics.KindCounter, "bifrost_memory_returned_total",
			"Times the return-to-OS policy forced memory back to the OS (debug.FreeOSMemory)."),
		returnedBytes: metrics.NewDesc(metrics.KindCounter, "bifrost_memory_returned_bytes_total",
			"Resident memory given back to the OS by the return-to-OS policy."),
	}
}

// Describe implements metrics.Collector.
func (c *collector) Describe() []*metrics.Desc {
	return []*metrics.Desc{c.pressure, c.used, c.hard, c.returned, c.returnedBytes}
}

// Collect implements metrics.Collector.
func (c *collector) Collect(w metrics.Writer) {
	p := c.p
	w.Value(c.pressure, float64(p.Pressure()))
	w.Value(c.used, float64(p.press.used.Load()))
	w.Value(c.hard, p.HardTime().Seconds())
	w.Value(c.returned, float64(p.returned.Load()))
	w.Value(c.returnedBytes, float64(p.retBytes.Load()))
}
