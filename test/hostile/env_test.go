package hostile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// quiet is the one window this suite waits out: proving that something does NOT happen
// needs one. Every other wait is on a condition (testenv.WaitFor), bounded by
// testenv.Timeout.
const quiet = 300 * time.Millisecond

// Limits every broker of this suite runs with, small so that the cases reach them with
// little traffic. connectTimeout is the mqtt.connect_timeout under test.
const (
	maxPacket      = 64 << 10
	aliasMax       = 4
	receiveMax     = 8
	connectTimeout = 2 * time.Second
)

// env is one broker under attack.
type env struct {
	b    *bifrost.Broker
	addr string // host:port of the TCP listener
	http string // host:port of the metrics endpoint
	cfg  *conf.Config
}

// start runs a broker with one TCP listener and the HTTP endpoint on random loopback
// ports, with this suite's limits; tune changes the config further. The broker is closed
// when the test ends, after its clients (cleanups run last-registered first).
func start(t testing.TB, tune func(*conf.Config)) *env {
	t.Helper()
	cfg := conf.Default()
	cfg.Listeners = []conf.Listener{{Name: "tcp", Type: conf.ListenerTCP, Address: "127.0.0.1:0"}}
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Store.Dir = t.TempDir()
	cfg.Log.Level = "warn"
	noSys := conf.Duration(0)
	cfg.SysInterval = &noSys
	cfg.MQTT.MaxPacketSize = maxPacket
	cfg.MQTT.TopicAliasMaximum = ptr(aliasMax)
	cfg.MQTT.ReceiveMaximum = receiveMax
	cfg.MQTT.ConnectTimeout = conf.Duration(connectTimeout)
	if tune != nil {
		tune(cfg)
	}
	b, err := bifrost.New(cfg, bifrost.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("broker close: %v", err)
		}
	})
	return &env{b: b, addr: b.Addrs()[0].String(), http: b.HTTPAddr().String(), cfg: cfg}
}

// testLogger discards the broker's log unless BIFROST_TEST_LOG is set, then logs at debug
// level to stderr.
func testLogger() *slog.Logger {
	if os.Getenv("BIFROST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func ptr[T any](v T) *T { return &v }

// metric returns the sum of the samples of the Prometheus series name whose labels
// contain every one of labels (`reason="slow_consumer"`), from the broker's /metrics.
func (e *env) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testenv.Timeout}
	resp, err := client.Get("http://" + e.http + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || len(line) == len(name) || (line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		t.Fatalf("reading /metrics: %v", err)
	}
	return sum
}

// conns is the number of connections the broker holds open on its TCP listener.
func (e *env) conns(t testing.TB) int {
	return int(e.metric(t, "bifrost_connections_current", `listener="tcp"`))
}

// liveHeap is the live heap after two full collections: what the process (broker and
// clients alike) holds, not garbage waiting for the collector.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// mib formats a byte count in MiB for logs.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// A sub is a named subtest.
type sub struct {
	name string
	f    func(t *testing.T)
}

// together runs the subtests at the same time, beyond go test's -parallel (which defaults
// to the CPU count): they spend their time waiting on the broker's timers, not computing.
func together(t *testing.T, subs ...sub) {
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { t.Run(s.name, s.f) })
	}
	wg.Wait()
}
