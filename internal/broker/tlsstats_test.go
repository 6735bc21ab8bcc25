package broker

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// TestTLSCollector: the handshake gate's three series are exported, at zero before any
// TLS client came.
func TestTLSCollector(t *testing.T) {
	b := benchBroker(t)
	got, err := metrics.Gather(newTLSCollector(b.net))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bifrost_tls_handshakes_running", "bifrost_tls_handshakes_waiting", "bifrost_tls_handshakes_refused_total"} {
		if v, ok := got[name][""]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v), want 0", name, v, ok)
		}
	}
	if len(got) != 3 {
		t.Errorf("exported %v, want the three series", got)
	}
}
