package metrics

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Gather collects c's series as Sums reports them and checks them as Prometheus's
// pedantic registry would: every family was in Describe, each series has one value per
// label name and none is reported twice. Tests use it to check a part's collector on
// its own.
func Gather(c Collector) (map[string]map[string]float64, error) {
	g := &gather{sums: sums{}, described: c.Describe(), seen: map[string]bool{}}
	c.Collect(g)
	return g.sums, errors.Join(g.errs...)
}

type gather struct {
	sums      sums
	described []*Desc
	seen      map[string]bool
	errs      []error
}

func (g *gather) check(d *Desc, labelValues []string) {
	if !slices.Contains(g.described, d) {
		g.errs = append(g.errs, fmt.Errorf("metrics: %s collected and not described", d.Name))
	}
	if len(labelValues) != len(d.Labels) {
		g.errs = append(g.errs, fmt.Errorf("metrics: %s: %d label values for labels %v", d.Name, len(labelValues), d.Labels))
	}
	key := d.Name + "{" + strings.Join(labelValues, ",") + "}"
	if g.seen[key] {
		g.errs = append(g.errs, fmt.Errorf("metrics: %s collected twice", key))
	}
	g.seen[key] = true
}

func (g *gather) Value(d *Desc, v float64, labelValues ...string) {
	g.check(d, labelValues)
	if d.Kind == KindHistogram {
		g.errs = append(g.errs, fmt.Errorf("metrics: %s: a histogram reported as a value", d.Name))
	}
	g.sums.Value(d, v, labelValues...)
}

func (g *gather) Histogram(d *Desc, h HistogramValue, labelValues ...string) {
	g.check(d, labelValues)
	if d.Kind != KindHistogram {
		g.errs = append(g.errs, fmt.Errorf("metrics: %s: a value reported as a histogram", d.Name))
	}
	g.sums.Histogram(d, h, labelValues...)
}
