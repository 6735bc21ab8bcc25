package metrics

import (
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Sums gathers the registry's bifrost_ families and returns each counter's and gauge's
// value by family name and by its label values joined with ","; a histogram gives
// name+"_sum" and name+"_count". The dashboard reads it once a second while someone
// watches, and nothing reads it otherwise.
func (r *Registry) Sums() map[string]map[string]float64 {
	fams, _ := r.reg.Gather() // what gathered is usable even when a collector failed
	out := make(map[string]map[string]float64, len(fams))
	add := func(name, key string, v float64) {
		m := out[name]
		if m == nil {
			m = map[string]float64{}
			out[name] = m
		}
		m[key] += v
	}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "bifrost_") {
			continue
		}
		for _, m := range f.GetMetric() {
			vals := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetValue())
			}
			key := strings.Join(vals, ",")
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, key, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, key, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				add(name+"_sum", key, m.GetHistogram().GetSampleSum())
				add(name+"_count", key, float64(m.GetHistogram().GetSampleCount()))
			}
		}
	}
	return out
}
