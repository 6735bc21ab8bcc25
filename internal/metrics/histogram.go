package metrics

import (
	"math"
	"sort"
	"sync/atomic"
)

// A Histogram counts observations into buckets by upper bound, as Prometheus's classic
// histograms do (an observation v falls into the first bucket whose bound is >= v), and
// keeps their sum. Observing costs a binary search and two atomic operations.
type Histogram struct {
	desc   *Desc
	bounds []float64       // ascending upper bounds; +Inf implied
	counts []atomic.Uint64 // per bucket, not cumulative: len(bounds)+1, the last for +Inf
	sum    atomic.Uint64   // float64 bits
}

// HistogramValue is a Histogram at one moment: Cumulative[i] observations were at most
// Bounds[i]; Count counts them all (the +Inf bucket).
type HistogramValue struct {
	Count      uint64
	Sum        float64
	Bounds     []float64
	Cumulative []uint64
}

// NewHistogram returns a Histogram with the given ascending bucket bounds.
func NewHistogram(name, help string, bounds []float64) *Histogram {
	return &Histogram{desc: NewDesc(KindHistogram, name, help), bounds: bounds,
		counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe adds one observation.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Value returns the histogram's counts now: the buckets and Count always agree; an
// observation racing with Value may be counted and not yet in Sum.
func (h *Histogram) Value() HistogramValue {
	v := HistogramValue{Bounds: h.bounds, Cumulative: make([]uint64, len(h.bounds))}
	for i := range h.bounds {
		v.Count += h.counts[i].Load()
		v.Cumulative[i] = v.Count
	}
	v.Count += h.counts[len(h.bounds)].Load()
	v.Sum = math.Float64frombits(h.sum.Load())
	return v
}

// Describe implements Collector.
func (h *Histogram) Describe() []*Desc { return []*Desc{h.desc} }

// Collect implements Collector.
func (h *Histogram) Collect(w Writer) { w.Histogram(h.desc, h.Value()) }
