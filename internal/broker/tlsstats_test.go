package broker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTLSCollector: the handshake gate's three series are exported, at zero before any
// TLS client came.
func TestTLSCollector(t *testing.T) {
	b := benchBroker(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newTLSCollector(b.net))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for _, name := range []string{"bifrost_tls_handshakes_running", "bifrost_tls_handshakes_waiting", "bifrost_tls_handshakes_refused_total"} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0", name, v, ok)
		}
	}
	if len(got) != 3 {
		t.Errorf("exported %v, want the three series", got)
	}
}
