package endpoint

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// gathered returns the names of the metric families p exposes.
func gathered(t *testing.T, p *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := p.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	names := make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

func promOf(t *testing.T, r *metrics.Registry) *prometheus.Registry {
	t.Helper()
	p, err := newPrometheus(r)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRegistryFamilies(t *testing.T) {
	r := metrics.New(nil)
	// Series with free-form labels exist once a child is resolved.
	r.ConnectionsCurrent.WithLabelValues("tcp").Inc()
	r.ConnectionsTotal.WithLabelValues("tcp").Inc()
	r.MessagesDropped.WithLabelValues("queue_full").Inc()
	r.MessagesReceived[1].Inc()
	r.MessagesSent[2].Add(3)
	runtime.GC() // so the GC series have something to say

	names := gathered(t, promOf(t, r))
	want := []string{
		"go_memstats_heap_alloc_bytes",
		"go_gc_cycles_total_gc_cycles_total",
		"go_gc_heap_goal_bytes",
		"go_memory_classes_heap_released_bytes",
		"go_cpu_classes_gc_total_cpu_seconds_total",
		"go_build_info",
		"bifrost_connections_current",
		"bifrost_connections_total",
		"bifrost_messages_received_total",
		"bifrost_messages_sent_total",
		"bifrost_messages_dropped_total",
		"bifrost_bytes_received_total",
		"bifrost_bytes_sent_total",
		"bifrost_subscriptions_current",
		"bifrost_retained_messages_current",
		"bifrost_gc_cpu_fraction",
		"bifrost_load",
	}
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes", "process_cpu_seconds_total")
	}
	for _, name := range want {
		if !names[name] {
			t.Errorf("family %s missing", name)
		}
	}
	for name := range names {
		if strings.HasPrefix(name, "go_godebug_") {
			t.Errorf("family %s exported; /godebug/ is left out", name)
		}
	}
}

// TestRegistriesIndependent checks that two brokers in one process keep separate counts
// and that neither touches the prometheus default registry.
func TestRegistriesIndependent(t *testing.T) {
	a, b := metrics.New(nil), metrics.New(nil)
	pa, pb := promOf(t, a), promOf(t, b)
	a.BytesSent.Add(10)
	for _, p := range []*prometheus.Registry{pa, pb} {
		if _, err := p.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := pb.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "bifrost_bytes_sent_total" {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 0 {
				t.Fatalf("b's bytes sent = %v after adding to a's", v)
			}
		}
	}
	def, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range def {
		if strings.HasPrefix(mf.GetName(), "bifrost_") {
			t.Errorf("%s in the default registry", mf.GetName())
		}
	}
}

func TestGCCPUFraction(t *testing.T) {
	runtime.GC()
	if f := gcCPUFraction(); f < 0 || f > 1 {
		t.Fatalf("gcCPUFraction() = %v, want within [0,1]", f)
	}
}

// badLabels reports a series with a label value its Desc has no name for.
type badLabels struct{ d *metrics.Desc }

func (b badLabels) Describe() []*metrics.Desc { return []*metrics.Desc{b.d} }
func (b badLabels) Collect(w metrics.Writer)  { w.Value(b.d, 1, "extra") }

// TestExporter: the registry's series reach Prometheus with their kinds (a histogram as
// one, with its buckets), the Prometheus collectors it keeps (the cluster's) are
// gathered beside them, and what cannot be exported fails the gathering instead of
// vanishing.
func TestExporter(t *testing.T) {
	r := metrics.New(nil)
	h := metrics.NewHistogram("bifrost_test_seconds", "h", []float64{0.1, 1})
	h.Observe(0.5)
	if err := r.Register(h); err != nil {
		t.Fatal(err)
	}
	kept := prometheus.NewCounter(prometheus.CounterOpts{Name: "bifrost_cluster_test_total", Help: "k"})
	kept.Add(2)
	if err := r.RegisterPrometheus(kept); err != nil {
		t.Fatal(err)
	}
	mfs, err := promOf(t, r).Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
		switch mf.GetName() {
		case "bifrost_test_seconds":
			hist := mf.GetMetric()[0].GetHistogram()
			if mf.GetType().String() != "HISTOGRAM" || hist.GetSampleCount() != 1 || hist.GetSampleSum() != 0.5 ||
				len(hist.GetBucket()) != 2 || hist.GetBucket()[0].GetCumulativeCount() != 0 || hist.GetBucket()[1].GetCumulativeCount() != 1 {
				t.Errorf("bifrost_test_seconds exported as %v", mf)
			}
		case "bifrost_bytes_sent_total":
			if mf.GetType().String() != "COUNTER" {
				t.Errorf("bifrost_bytes_sent_total exported as a %v", mf.GetType())
			}
		case "bifrost_subscriptions_current":
			if mf.GetType().String() != "GAUGE" {
				t.Errorf("bifrost_subscriptions_current exported as a %v", mf.GetType())
			}
		case "bifrost_cluster_test_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 2 {
				t.Errorf("the kept collector's counter = %v, want 2", v)
			}
		}
	}
	for _, name := range []string{"bifrost_test_seconds", "bifrost_bytes_sent_total", "bifrost_subscriptions_current", "bifrost_cluster_test_total"} {
		if !found[name] {
			t.Errorf("%s not gathered", name)
		}
	}

	for name, bad := range map[string]func(r *metrics.Registry) error{
		"not a prometheus.Collector": func(r *metrics.Registry) error { return r.RegisterPrometheus("x") },
		"wrong label count": func(r *metrics.Registry) error {
			return r.Register(badLabels{metrics.NewDesc(metrics.KindGauge, "bifrost_bad", "b")})
		},
	} {
		r := metrics.New(nil)
		if err := bad(r); err != nil {
			t.Fatal(err)
		}
		if _, err := promOf(t, r).Gather(); err == nil {
			t.Errorf("%s: Gather succeeded", name)
		}
	}
}
