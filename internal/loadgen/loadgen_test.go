package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/loadgen"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// workerArg, as the first argument of the test binary, makes it a worker process of a conns
// run: the role the command name plays for the real binary, bifrost-bench.
const workerArg = "loadgen-worker"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerArg {
		os.Exit(loadgen.Main(os.Args[2:], os.Stdout, os.Stderr, []string{workerArg}))
	}
	os.Exit(m.Run())
}

// startBroker starts an in-process bifrost on a free loopback port and returns its address.
func startBroker(t *testing.T) string { return startBrokerOn(t, conf.ListenerTCP) }

// startBrokerOn starts an in-process bifrost with one listener of type typ (tcp, or ws
// on the default path /mqtt) on a free loopback port and returns its address.
func startBrokerOn(t *testing.T, typ string) string {
	t.Helper()
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = conf.HTTPOff
	cfg.Store.Dir = t.TempDir()
	cfg.Listeners = []conf.Listener{{Name: "mqtt", Type: typ, Address: "127.0.0.1:0"}}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b.Addrs()[0].String()
}

func run(t *testing.T, o *loadgen.Options) *loadgen.Report {
	t.Helper()
	o.Timeout = 20 * time.Second
	r, err := loadgen.Run(t.Context(), o, []string{workerArg})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Errors) > 0 {
		t.Errorf("errors: %q", r.Errors)
	}
	return r
}

// TestFanInQoS1 is the guarantee the QoS 1 figures rest on: nothing lost, every message
// acknowledged, a latency for each.
func TestFanInQoS1(t *testing.T) {
	addr := startBroker(t)
	r := run(t, &loadgen.Options{Mode: loadgen.ModeFanIn, Addr: addr, QoS: 1, Count: 200, Publishers: 4,
		PID: os.Getpid()})
	tr := r.Traffic
	if tr.Sent != 800 || tr.Received != 800 || tr.Expected != 800 || tr.Lost != 0 || tr.Acked != 800 {
		t.Fatalf("sent %d, expected %d, received %d, lost %d, acked %d; want 800, 800, 800, 0, 800",
			tr.Sent, tr.Expected, tr.Received, tr.Lost, tr.Acked)
	}
	if tr.Latency.P50 <= 0 || tr.Latency.P50 > tr.Latency.P99 || tr.Latency.P99 > tr.Latency.Max {
		t.Errorf("latency %+v out of order", tr.Latency)
	}
	if r.Broker == nil || r.Broker.RSSAfter <= 0 || r.Broker.MsgsPerCPUS < 0 {
		t.Errorf("broker usage %+v, want this process's figures", r.Broker)
	}
}

// TestTraffic runs each mode briefly in each version and QoS it is least likely to pass by
// luck: fan-out at QoS 2 over 5.0 exercises PUBREC/PUBREL/PUBCOMP both ways.
func TestTraffic(t *testing.T) {
	addr := startBroker(t)
	for _, tc := range []struct {
		mode    string
		qos     byte
		version packet.Version
		rate    float64
		due     int64
	}{
		{loadgen.ModeFanOut, 2, packet.V5, 0, 50 * 5},
		{loadgen.ModeFanIn, 1, packet.V311, 0, 50 * 3 * 5},
		{loadgen.ModePair, 1, packet.V5, 0, 50 * 3},
		{loadgen.ModePair, 0, packet.V311, 2000, 50 * 3},
	} {
		t.Run(fmt.Sprintf("%s/QoS=%d/%v", tc.mode, tc.qos, tc.version), func(t *testing.T) {
			r := run(t, &loadgen.Options{Mode: tc.mode, Addr: addr, QoS: tc.qos, Version: tc.version,
				Count: 50, Publishers: 3, Subscribers: 5, Pairs: 3, Rate: tc.rate, RecvMax: 100})
			if tr := r.Traffic; tr.Expected != tc.due || tr.Received != tc.due || tr.Lost != 0 || tr.Duplicates != 0 || tr.Reordered != 0 {
				t.Fatalf("expected %d, received %d, lost %d, duplicates %d, reordered %d; want %d, %d, 0, 0, 0",
					tr.Expected, tr.Received, tr.Lost, tr.Duplicates, tr.Reordered, tc.due, tc.due)
			}
		})
	}
}

// TestTrafficPersistent: subscribers with persistent sessions (-session-expiry), whose
// messages the broker stores before acknowledging, lose nothing either.
func TestTrafficPersistent(t *testing.T) {
	addr := startBroker(t)
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			r := run(t, &loadgen.Options{Mode: loadgen.ModePair, Addr: addr, QoS: 1, Version: v,
				Count: 50, Pairs: 3, Rate: 500, SessionExpiry: 60})
			if tr := r.Traffic; tr.Received != 150 || tr.Lost != 0 || tr.Acked != 150 {
				t.Fatalf("received %d, lost %d, acked %d; want 150, 0, 150", tr.Received, tr.Lost, tr.Acked)
			}
			if r.Params.SessionExp != 60 {
				t.Fatalf("report params %+v: session expiry not reported", r.Params)
			}
		})
	}
}

// TestConns opens idle connections in worker processes (3 of 10 connections at most) and
// in this one, and measures this process as the broker.
func TestConns(t *testing.T) {
	addr := startBroker(t)
	for _, tc := range []struct {
		name    string
		perProc int
		procs   int
	}{{"in process", 100, 1}, {"in workers", 10, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, &loadgen.Options{Mode: loadgen.ModeConns, Addr: addr, Conns: 25, Subscribe: true, QoS: 1,
				Version: packet.V5, KeepAlive: 30, PerProcess: tc.perProc, Settle: time.Millisecond, PID: os.Getpid()})
			if c := r.Conns; c.Connected != 25 || c.Failed != 0 || c.Procs != tc.procs || c.ConnectRate <= 0 {
				t.Fatalf("conns %+v; want 25 connected in %d process(es)", c, tc.procs)
			}
			if r.Broker == nil || r.Broker.RSSBefore <= 0 || r.Broker.RSSAfter <= 0 {
				t.Fatalf("broker %+v", r.Broker)
			}
		})
	}
}

// TestWebSocket runs conns (in workers, which must be told the path) and QoS 1 fan-in over
// ws: every connection made, nothing lost.
func TestWebSocket(t *testing.T) {
	addr := startBrokerOn(t, conf.ListenerWS)
	r := run(t, &loadgen.Options{Mode: loadgen.ModeConns, Addr: addr, WSPath: conf.DefaultWSPath, Conns: 25,
		Subscribe: true, QoS: 1, PerProcess: 10, Settle: time.Millisecond, PID: os.Getpid()})
	if c := r.Conns; c.Connected != 25 || c.Failed != 0 || c.Procs != 3 {
		t.Fatalf("conns %+v; want 25 connected in 3 processes", c)
	}
	r = run(t, &loadgen.Options{Mode: loadgen.ModeFanIn, Addr: addr, WSPath: conf.DefaultWSPath, QoS: 1,
		Count: 200, Publishers: 4, Version: packet.V5})
	if tr := r.Traffic; tr.Sent != 800 || tr.Received != 800 || tr.Lost != 0 || tr.Acked != 800 {
		t.Fatalf("sent %d, received %d, lost %d, acked %d; want 800, 800, 0, 800", tr.Sent, tr.Received, tr.Lost, tr.Acked)
	}
}

// TestMainOutput checks the command's output: lines for people, then one JSON line, or
// the JSON line alone.
func TestMainOutput(t *testing.T) {
	addr := startBroker(t)
	args := []string{loadgen.ModePair, "-addr", addr, "-count", "20", "-pairs", "2", "-qos", "1", "-version", "5.0"}
	var out, errOut bytes.Buffer
	if code := loadgen.Main(args, &out, &errOut, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 || !strings.Contains(out.String(), "latency:") {
		t.Fatalf("output:\n%s", out.String())
	}
	var r loadgen.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("last line is not the JSON report: %v", err)
	}
	if r.Params.Mode != "pair" || r.Params.Version != "5.0" || r.Params.QoS != 1 || r.Traffic.Received != 40 {
		t.Fatalf("report %+v", r)
	}

	out.Reset()
	if code := loadgen.Main(append(args, "-json-only"), &out, &errOut, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 1 || !json.Valid(out.Bytes()) {
		t.Fatalf("-json-only printed %d lines:\n%s", n, out.String())
	}
}

func TestMainMisuse(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"fanin", "-qos", "3"},
		{"fanin", "-version", "4.0"},
		{"fanin", "-size", "8"},
		{"fanin", "extra"},
		{"fanin", "-addr", "192.0.2.1:1883"}, // fails at run time: not loopback
		{"conns", "-worker"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := loadgen.Main(args, &out, &errOut, nil)
			if code == 0 || errOut.Len() == 0 {
				t.Fatalf("exit %d, stderr %q; want an error", code, errOut.String())
			}
		})
	}
}

func TestRunStopsWithContext(t *testing.T) {
	addr := startBroker(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := loadgen.Run(ctx, &loadgen.Options{Mode: loadgen.ModeFanIn, Addr: addr, Duration: time.Minute, Rate: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run took %v after its context ended", d)
	}
	if r.Traffic.Sent == 0 {
		t.Fatal("nothing sent")
	}
}

// TestChurn runs the churn mode briefly against an in-process broker: cycles complete,
// none fail, and the broker figures are read.
func TestChurn(t *testing.T) {
	addr := startBroker(t)
	// Not run(): on a loaded machine a SYN may be dropped and a dial time out, which the
	// report counts as a failure; a few are tolerated.
	r, err := loadgen.Run(t.Context(), &loadgen.Options{Mode: loadgen.ModeChurn, Addr: addr, Concurrency: 4,
		Duration: 300 * time.Millisecond, Settle: time.Millisecond, PID: os.Getpid(), Timeout: 20 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Churn
	if c == nil || c.Cycles == 0 || c.Failed > c.Cycles/10 || c.CycleRate <= 0 {
		t.Fatalf("churn %+v, errors %q; want cycles and few failures", c, r.Errors)
	}
	if c.Failed > 0 && len(r.Errors) == 0 {
		t.Fatalf("%d failures but no error reported", c.Failed)
	}
	if c.RSSBefore <= 0 || c.RSSPeak < c.RSSBefore || c.RSSAfter <= 0 {
		t.Fatalf("churn RSS before %d, peak %d, after %d", c.RSSBefore, c.RSSPeak, c.RSSAfter)
	}
}
