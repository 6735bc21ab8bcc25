package metrics

import "strings"

// Sums returns the value of each of the registry's counters and gauges by family name
// and by its label values joined with ","; a histogram gives name+"_sum" and
// name+"_count". The dashboard reads it once a second while someone watches, and nothing
// reads it otherwise. The collectors kept by RegisterPrometheus are not in it.
func (r *Registry) Sums() map[string]map[string]float64 {
	s := sums{}
	r.Collect(s)
	return s
}

// sums is a Writer that adds up what it is given.
type sums map[string]map[string]float64

func (s sums) add(name string, labelValues []string, v float64) {
	m := s[name]
	if m == nil {
		m = map[string]float64{}
		s[name] = m
	}
	m[strings.Join(labelValues, ",")] += v
}

func (s sums) Value(d *Desc, v float64, labelValues ...string) { s.add(d.Name, labelValues, v) }

func (s sums) Histogram(d *Desc, h HistogramValue, labelValues ...string) {
	s.add(d.Name+"_sum", labelValues, h.Sum)
	s.add(d.Name+"_count", labelValues, float64(h.Count))
}
