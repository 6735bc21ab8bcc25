package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// binary is the bifrost-bench command built once by TestMain; "" when the go tool is missing.
var binary string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	if gotool, err := exec.LookPath("go"); err == nil {
		dir, err := os.MkdirTemp("", "bifrost-bench-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "bifrost-bench")
		if out, err := exec.Command(gotool, "build", "-o", binary, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}

// runBinary runs the built binary to completion and returns its exit code and output.
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	testenv.Need(t, binary != "", "the go tool, to build the binary")
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
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
