package endpoint

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// serve starts an endpoint on a random loopback port and shuts it down when t ends.
func serve(t *testing.T, reg *metrics.Registry) *Server {
	t.Helper()
	cfg := conf.Default().HTTP
	cfg.Address = "127.0.0.1:0"
	s, err := Listen(cfg, reg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(t.Context()) }()
	t.Cleanup(func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-errc; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func get(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestHTTPMetrics(t *testing.T) {
	reg := metrics.New(nil)
	reg.ConnectionsCurrent.WithLabelValues("tcp").Set(3)
	s := serve(t, reg)
	code, body := get(t, s, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	want := []string{
		"go_memstats_heap_alloc_bytes ",
		"go_gc_heap_goal_bytes ",
		"bifrost_gc_cpu_fraction ",
		"bifrost_load 0",
		`bifrost_connections_current{listener="tcp"} 3`,
		`bifrost_messages_received_total{qos="0"} 0`,
	}
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes ")
	}
	for _, w := range want {
		if !strings.Contains(body, "\n"+w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}

func TestHTTPHealthz(t *testing.T) {
	s := serve(t, metrics.New(nil))
	if code, body := get(t, s, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q, want 200 ok", code, body)
	}
	s.SetReady(false)
	if code, _ := get(t, s, "/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz when not ready = %d, want 503", code)
	}
	s.SetReady(true)
	if code, _ := get(t, s, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz ready again = %d, want 200", code)
	}
}

func TestHTTPPprof(t *testing.T) {
	s := serve(t, metrics.New(nil))
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
		if code, _ := get(t, s, path); code != http.StatusOK {
			t.Errorf("%s: %d, want 200", path, code)
		}
	}
}

func TestHTTPLoad(t *testing.T) {
	in := metrics.LoadInput{Connections: 20, MaxConnections: 80, MemoryBytes: 10, MemoryLimitBytes: 100}
	s := serve(t, metrics.New(func() metrics.LoadInput { return in }))
	code, body := get(t, s, "/load")
	if code != http.StatusOK {
		t.Fatalf("/load: %d", code)
	}
	var got map[string]float64
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/load body %q: %v", body, err)
	}
	want := map[string]float64{"load": 0.25, "connections": 20, "max_connections": 80, "memory_bytes": 10, "memory_limit_bytes": 100}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("/load %s = %v, want %v (body %s)", k, got[k], v, body)
		}
	}
	if _, body := get(t, s, "/metrics"); !strings.Contains(body, "\nbifrost_load 0.25\n") {
		t.Errorf("/metrics lacks bifrost_load 0.25")
	}
}

func TestListenOff(t *testing.T) {
	s, err := Listen(conf.HTTP{Address: "off"}, metrics.New(nil), slog.New(slog.DiscardHandler), nil)
	if s != nil || err != nil {
		t.Fatalf("Listen(off) = %v, %v; want nil, nil", s, err)
	}
}

func TestListenInUse(t *testing.T) {
	s := serve(t, metrics.New(nil))
	_, err := Listen(conf.HTTP{Address: s.Addr().String()}, metrics.New(nil), slog.New(slog.DiscardHandler), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "endpoint: http listen:") {
		t.Fatalf("Listen on a taken port: %v", err)
	}
}

// TestHTTPLoadNodes: a cluster node's /load lists the nodes SetNodes gives, and a single
// node's has no nodes field at all; Handle adds a path.
func TestHTTPLoadNodes(t *testing.T) {
	reg := metrics.New(nil)
	s := serve(t, reg)
	if _, body := get(t, s, "/load"); strings.Contains(body, "nodes") {
		t.Errorf("a single node's /load: %s", body)
	}
	nodes := []metrics.NodeLoad{{Name: "n1", State: "alive", Leader: true, Self: true, RPC: "10.0.0.1:7947", MQTT: "10.0.0.1:1883", Load: 0.5},
		{Name: "n2", State: "suspect", RPC: "10.0.0.2:7947", MQTT: "10.0.0.2:1883", Load: 0.25}}
	reg.SetNodes(func() []metrics.NodeLoad { return nodes })
	s.Handle("GET /extra", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }))
	_, body := get(t, s, "/load")
	var got metrics.LoadReport
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 2 || got.Nodes[0] != nodes[0] || got.Nodes[1] != nodes[1] {
		t.Errorf("/load nodes %+v; want %+v", got.Nodes, nodes)
	}
	if code, body := get(t, s, "/extra"); code != http.StatusOK || body != "x" {
		t.Errorf("/extra: %d %q", code, body)
	}
}
