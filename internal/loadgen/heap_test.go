package loadgen

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestScanGauge(t *testing.T) {
	text := "# HELP go_memstats_heap_alloc_bytes x\n# TYPE go_memstats_heap_alloc_bytes gauge\n" +
		"go_memstats_heap_alloc_bytes_total 1\ngo_memstats_heap_alloc_bytes 1.2345678e+07\n"
	v, err := scanGauges(strings.NewReader(text), heapMetric)
	if err != nil || v[0] != 12345678 {
		t.Fatalf("scanGauges = %v, %v; want 12345678", v, err)
	}
	if _, err := scanGauges(strings.NewReader("other 1\n"), heapMetric); err == nil {
		t.Fatal("scanGauges found a gauge that is not there")
	}
}

func TestCheckMetricsURL(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "http://[::1]:8080/"} {
		if err := checkMetricsURL(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"https://127.0.0.1:8080", "http://10.0.0.1:8080", "http://example.com",
		"http://127.0.0.1:8080/metrics", "127.0.0.1:8080"} {
		if err := checkMetricsURL(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestLiveHeap checks that the GC is forced before the heap is read.
func TestLiveHeap(t *testing.T) {
	var forced atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/debug/pprof/heap" && r.URL.Query().Get("gc") == "1":
			forced.Store(true)
		case r.URL.Path == "/metrics" && forced.Load():
			fmt.Fprintln(w, "go_memstats_heap_alloc_bytes 4096")
		case r.URL.Path == "/metrics":
			fmt.Fprintln(w, "go_memstats_heap_alloc_bytes 999999")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	v, err := liveHeap(t.Context(), srv.URL)
	if err != nil || v != 4096 {
		t.Fatalf("liveHeap = %d, %v; want 4096 after a forced GC", v, err)
	}
}
