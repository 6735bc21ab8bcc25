package bifrost_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is the default config with the HTTP endpoint on a free loopback port and the
// store in a directory of the test's.
func testConfig(t testing.TB) *bifrost.Config {
	cfg := bifrost.DefaultConfig()
	cfg.Store.Dir = t.TempDir()
	cfg.HTTP.Address = "127.0.0.1:0"
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	return cfg
}

// syncBuffer is a log sink safe for the broker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start returns a started broker logging to the returned buffer; t closes it at the end.
func start(t *testing.T, cfg *bifrost.Config) (*bifrost.Broker, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b, &logs
}

// get fetches path from the broker's HTTP endpoint without keeping the connection, so no
// client goroutine outlives the test.
func get(t *testing.T, addr net.Addr, path string) (int, string, error) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr.String() + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestStartServesHTTP(t *testing.T) {
	b, logs := start(t, testConfig(t))
	addr := b.HTTPAddr()
	if addr == nil {
		t.Fatal("HTTPAddr is nil after Start")
	}
	if !strings.Contains(logs.String(), "msg=\"http listening\" addr="+addr.String()) {
		t.Errorf("log does not announce the http address:\n%s", logs)
	}
	for _, a := range b.Addrs() {
		if !strings.Contains(logs.String(), "addr="+a.String()) {
			t.Errorf("log does not announce the MQTT listener %s:\n%s", a, logs)
		}
	}
	// The serving goroutine was started through the broker's helper, which labels it.
	if _, body, err := get(t, addr, "/debug/pprof/goroutine?debug=1"); err != nil || !strings.Contains(body, `"bifrost":"http"`) {
		t.Errorf("goroutine profile lacks the label bifrost=http (err %v)", err)
	}
	for _, path := range []string{"/healthz", "/metrics", "/load", "/debug/pprof/"} {
		if code, _, err := get(t, addr, path); err != nil || code != http.StatusOK {
			t.Errorf("GET %s = %d, %v; want 200", path, code, err)
		}
	}
}

func TestCloseStopsHTTP(t *testing.T) {
	b, _ := start(t, testConfig(t))
	addr := b.HTTPAddr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(t, addr, "/healthz"); err == nil {
		t.Fatal("/healthz still answers after Close")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Start(t.Context()); !errors.Is(err, bifrost.ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestStartTwice(t *testing.T) {
	b, _ := start(t, testConfig(t))
	if err := b.Start(t.Context()); !errors.Is(err, bifrost.ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
}

func TestCloseBeforeStart(t *testing.T) {
	b, err := bifrost.New(testConfig(t), bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPOff(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTP.Address = "off"
	b, logs := start(t, cfg)
	if addr := b.HTTPAddr(); addr != nil {
		t.Fatalf("HTTPAddr = %v with http off", addr)
	}
	if strings.Contains(logs.String(), "http listening") {
		t.Fatalf("log claims an http endpoint that is off:\n%s", logs)
	}
}

func TestStartPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t)
	cfg.HTTP.Address = ln.Addr().String()
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("Start on a taken port = %v, want a listen error", err)
	}
}

func TestStartCancelled(t *testing.T) {
	b, err := bifrost.New(testConfig(t), bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Start(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context = %v", err)
	}
}

func TestNewInvalidConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.Log.Level = "loud"
	cfg.Store.Sync = "sometimes"
	_, err := bifrost.New(cfg)
	if err == nil {
		t.Fatal("New accepted an invalid config")
	}
	for _, field := range []string{"log.level", "store.sync"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error does not name %s: %v", field, err)
		}
	}
}

func TestNewNilConfig(t *testing.T) {
	b, err := bifrost.New(nil, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewCopiesConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.Log.Level = ""
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if cfg.Log.Level != "" {
		t.Fatalf("New changed the caller's config: log.level = %q", cfg.Log.Level)
	}
}

// TestStoreMetrics: with a store, /metrics carries the store's series, and they move
// when something is stored (a retained message).
func TestStoreMetrics(t *testing.T) {
	b, _ := start(t, testConfig(t))
	// value returns the sample of a series without labels, -1 if it is absent.
	value := func(body, name string) float64 {
		for line := range strings.Lines(body) {
			if rest, ok := strings.CutPrefix(line, name+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return v
			}
		}
		return -1
	}
	scrape := func() string {
		_, body, err := get(t, b.HTTPAddr(), "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	body := scrape()
	for _, name := range []string{"bifrost_store_commits_total", "bifrost_store_commit_failures_total",
		"bifrost_store_commit_groups_total", "bifrost_store_written_bytes_total",
		"bifrost_store_commit_duration_seconds_count", "bifrost_store_disk_written_bytes_total",
		"bifrost_store_disk_bytes", "bifrost_store_memtable_bytes", "bifrost_store_block_cache_bytes",
		"bifrost_store_messages"} {
		if value(body, name) < 0 {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	commits := value(body, "bifrost_store_commits_total")
	if err := b.Publish("kept/topic", []byte("retained"), 1, true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, fmt.Sprintf("the store series to move: commits above %v, 1 message", commits), func() bool {
		body = scrape()
		return value(body, "bifrost_store_commits_total") > commits && value(body, "bifrost_store_messages") == 1
	})
	if value(body, "bifrost_store_written_bytes_total") <= 0 || value(body, "bifrost_store_disk_bytes") <= 0 {
		t.Errorf("written %v, disk %v: want both above 0", value(body, "bifrost_store_written_bytes_total"),
			value(body, "bifrost_store_disk_bytes"))
	}
}
