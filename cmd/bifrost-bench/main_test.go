package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// binary is the bifrost-bench command, built once.
var binary = &testenv.Binary{Pkg: "."}

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Cleanup()
	os.Exit(code)
}

// runBinary runs the built binary to completion and returns its exit code and output.
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return testenv.Run(t, binary.Path(t), args...)
}

// startBroker starts an in-process bifrost without a store on a free loopback port and
// returns its address.
func startBroker(t *testing.T) string {
	t.Helper()
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = bifrost.HTTPOff
	cfg.Store.Dir = bifrost.StoreOff
	cfg.Listeners = []bifrost.Listener{{Name: "mqtt", Type: bifrost.ListenerTCP, Address: "127.0.0.1:0"}}
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

// TestConnsInWorkers runs a conns run larger than one process's share: its workers are
// this binary re-executed, so every connection is made only if they start as
// `bifrost-bench conns -worker ...`.
func TestConnsInWorkers(t *testing.T) {
	addr := startBroker(t)
	code, stdout, stderr := runBinary(t, "conns", "-addr", addr, "-n", "25", "-per-proc", "10",
		"-settle", "1ms", "-timeout", "30s", "-json-only")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var r struct {
		Conns struct {
			Connected int `json:"connected"`
			Failed    int `json:"failed"`
			Procs     int `json:"procs"`
		} `json:"conns"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("stdout is not one JSON report: %v\n%s", err, stdout)
	}
	if c := r.Conns; c.Connected != 25 || c.Failed != 0 || c.Procs != 3 || len(r.Errors) > 0 {
		t.Fatalf("conns %+v, errors %q; want 25 connected in 3 processes", c, r.Errors)
	}
}

func TestUsage(t *testing.T) {
	if code, _, stderr := runBinary(t, "-h"); code != 0 || !strings.HasPrefix(stderr, "usage: bifrost-bench MODE") {
		t.Fatalf("exit %d, stderr %q; want 0 and the usage", code, stderr)
	}
	if code, _, stderr := runBinary(t); code != 2 || !strings.Contains(stderr, "modes:") {
		t.Fatalf("no arguments: exit %d, stderr %q; want 2 and the usage", code, stderr)
	}
}
