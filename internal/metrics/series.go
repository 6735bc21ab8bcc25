package metrics

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
)

// A Kind is what a series counts, as Prometheus types it.
type Kind uint8

// The kinds of series.
const (
	KindCounter   Kind = iota // only goes up (from 0 at start)
	KindGauge                 // goes up and down
	KindHistogram             // observations in buckets, with their count and sum
)

// A Desc describes a family of series: its name, help, kind and label names. Descs are
// made once, when their collector is made, and compared by pointer.
type Desc struct {
	Name   string
	Help   string
	Kind   Kind
	Labels []string
}

// NewDesc returns the Desc of a family.
func NewDesc(kind Kind, name, help string, labels ...string) *Desc {
	return &Desc{Name: name, Help: help, Kind: kind, Labels: labels}
}

// A Writer receives the series a Collector reports: one call per series, with its label
// values in the order of the Desc's label names.
type Writer interface {
	Value(d *Desc, v float64, labelValues ...string)
	Histogram(d *Desc, h HistogramValue, labelValues ...string)
}

// A Collector reports series at scrape time. Describe lists the families Collect may
// report (the registry refuses a name twice); Collect must be safe for concurrent use
// and cheap: it runs on every scrape and dashboard tick.
type Collector interface {
	Describe() []*Desc
	Collect(w Writer)
}

// A Counter is a count that only goes up: adding to it is one atomic add.
type Counter struct{ v atomic.Uint64 }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Inc adds 1.
func (c *Counter) Inc() { c.v.Add(1) }

// Load returns the count.
func (c *Counter) Load() uint64 { return c.v.Load() }

// A Gauge is a value that goes up and down: one atomic operation per change.
type Gauge struct{ v atomic.Int64 }

// Add adds n (negative to subtract).
func (g *Gauge) Add(n int64) { g.v.Add(n) }

// Inc adds 1.
func (g *Gauge) Inc() { g.v.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.v.Add(-1) }

// Set sets the value.
func (g *Gauge) Set(n int64) { g.v.Store(n) }

// Load returns the value.
func (g *Gauge) Load() int64 { return g.v.Load() }

// value is what a series of a Vec reports.
func value[T Counter | Gauge](s *T) float64 {
	switch s := any(s).(type) {
	case *Counter:
		return float64(s.Load())
	case *Gauge:
		return float64(s.Load())
	}
	return math.NaN()
}

// A Vec is a family of counters or gauges told apart by label values. Resolving a child
// (WithLabelValues) takes a lock, so callers on a hot path resolve theirs once and keep
// it; a family with no child resolved reports nothing.
type Vec[T Counter | Gauge] struct {
	desc     *Desc
	mu       sync.Mutex
	order    []*child[T] // in the order resolved; the exposition sorts them
	children map[string]*child[T]
}

type child[T Counter | Gauge] struct {
	values []string
	s      T
}

// CounterVec and GaugeVec are the families of counters and gauges.
type (
	CounterVec = Vec[Counter]
	GaugeVec   = Vec[Gauge]
)

// NewCounterVec returns a family of counters with the given label names.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	return &CounterVec{desc: NewDesc(KindCounter, name, help, labels...)}
}

// NewGaugeVec returns a family of gauges with the given label names.
func NewGaugeVec(name, help string, labels ...string) *GaugeVec {
	return &GaugeVec{desc: NewDesc(KindGauge, name, help, labels...)}
}

// WithLabelValues returns the series of the family with these label values, one per
// label name, making it on first use.
func (v *Vec[T]) WithLabelValues(values ...string) *T {
	if len(values) != len(v.desc.Labels) {
		panic("metrics: " + v.desc.Name + ": wrong number of label values")
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.children[key]
	if c == nil {
		if v.children == nil {
			v.children = map[string]*child[T]{}
		}
		c = &child[T]{values: append([]string(nil), values...)}
		v.children[key] = c
		v.order = append(v.order, c)
	}
	return &c.s
}

// Describe implements Collector.
func (v *Vec[T]) Describe() []*Desc { return []*Desc{v.desc} }

// Collect implements Collector.
func (v *Vec[T]) Collect(w Writer) {
	v.mu.Lock()
	order := v.order
	v.mu.Unlock()
	for _, c := range order { // children are only added: the slice's prefix is stable
		w.Value(v.desc, value(&c.s), c.values...)
	}
}

// A gaugeFunc reports the value of a function at scrape time.
type gaugeFunc struct {
	desc *Desc
	fn   func() float64
}

// NewGaugeFunc returns a Collector of one gauge whose value fn gives at scrape time; fn
// must be safe for concurrent use and cheap.
func NewGaugeFunc(name, help string, fn func() float64) Collector {
	return gaugeFunc{NewDesc(KindGauge, name, help), fn}
}

func (g gaugeFunc) Describe() []*Desc { return []*Desc{g.desc} }
func (g gaugeFunc) Collect(w Writer)  { w.Value(g.desc, g.fn()) }
