package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// heapMetric is the Prometheus gauge read for the live heap: after a forced GC the heap's
// objects are all live (the Go client's go_memstats_heap_alloc_bytes is
// /memory/classes/heap/objects:bytes).
const heapMetric = "go_memstats_heap_alloc_bytes"

// plainClient asks for uncompressed answers: a gzip writer costs the broker a megabyte of
// heap the first time, which the RSS the tool measures would count against connections.
var plainClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// liveHeap forces a GC in a bifrost broker through its pprof endpoint
// (/debug/pprof/heap?gc=1&debug=1, the text form: no gzip either) and then reads its heap from /metrics, both under base, the
// broker's HTTP address (http://127.0.0.1:8080). RSS says what the process costs the
// machine; the live heap says what its state costs, without the GC's headroom, so the two
// are reported apart.
func liveHeap(ctx context.Context, base string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	get := func(path string) (io.ReadCloser, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := plainClient.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("loadgen: GET %s: %s", base+path, resp.Status)
		}
		return resp.Body, nil
	}
	body, err := get("/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, body)
	body.Close()
	if err != nil {
		return 0, err
	}
	if body, err = get("/metrics"); err != nil {
		return 0, err
	}
	defer body.Close()
	v, err := scanGauges(body, heapMetric)
	if err != nil {
		return 0, err
	}
	return int64(v[0]), nil
}

// The runtime/metrics figures a traffic run reads before and after, as the Prometheus Go
// collector exports them: GC cycles, CPU the GC used, and all CPU available to the
// process (GOMAXPROCS × wall time), the runtime's own estimates.
var gcMetrics = [...]string{
	"go_gc_cycles_total_gc_cycles_total",
	"go_cpu_classes_gc_total_cpu_seconds_total",
	"go_cpu_classes_total_cpu_seconds_total",
}

// gcSample reads gcMetrics from a bifrost broker's /metrics under base.
func gcSample(ctx context.Context, base string) ([len(gcMetrics)]float64, error) {
	var out [len(gcMetrics)]float64
	v, err := metricsGauges(ctx, base, gcMetrics[:]...)
	if err == nil {
		copy(out[:], v)
	}
	return out, err
}

// metricsGauges reads the unlabelled metrics names from a bifrost broker's /metrics under
// base.
func metricsGauges(ctx context.Context, base string, names ...string) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("loadgen: GET %s/metrics: %s", base, resp.Status)
	}
	return scanGauges(resp.Body, names...)
}

// scanGauges returns the values of the unlabelled metrics names, in order, from a
// Prometheus text exposition.
func scanGauges(r io.Reader, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && found < len(names) {
		line := sc.Text()
		for i, name := range names {
			v, ok := strings.CutPrefix(line, name+" ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return nil, fmt.Errorf("loadgen: %s: %w", name, err)
			}
			out[i] = f
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if found < len(names) {
		return nil, fmt.Errorf("loadgen: the broker's metrics lack some of %v", names)
	}
	return out, nil
}

// checkMetricsURL accepts an http URL on a loopback address: the tool only ever talks to
// brokers on this machine.
func checkMetricsURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("metrics %q: %v", s, err)
	}
	if u.Scheme != "http" || u.Path != "" && u.Path != "/" {
		return fmt.Errorf("metrics %q: want http://IP:PORT, the broker's HTTP address", s)
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("metrics %q: want a loopback address", s)
	}
	return nil
}
