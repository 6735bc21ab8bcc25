package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// binary is the bifrost command, built once.
var binary = &testenv.Binary{Pkg: ".", Flags: []string{"-tags", strings.TrimSpace(brokerTags + " " + pebbleTags), "-ldflags", "-X main.version=" + testVersion}}

const testVersion = "v0.0.0-test"

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

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckConfigBad(t *testing.T) {
	path := writeFile(t, "bad.yaml", "log:\n  level: loud\nhttp:\n  address: nonsense\n")
	code, stdout, stderr := runBinary(t, "check-config", "-c", path)
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 2 ||
		!strings.HasPrefix(lines[0], path+":2: log.level: ") ||
		!strings.HasPrefix(lines[1], path+":4: http.address: ") {
		t.Fatalf("stderr does not name each field on its own line:\n%s", stderr)
	}
}

// TestCheckConfigCluster: the cluster block's problems are printed like the others'.
func TestCheckConfigCluster(t *testing.T) {
	path := writeFile(t, "cluster.yaml", "store:\n  dir: \"off\"\ncluster:\n  node_name: n1\n  seeds: [n2]\n")
	code, _, stderr := runBinary(t, "check-config", "-c", path)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 1 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], path+":3: cluster.dir: required when store.dir is off") ||
		!strings.HasPrefix(lines[1], path+":5: cluster.seeds[0]: ") {
		t.Fatalf("exit %d; stderr does not name each cluster field on its own line:\n%s", code, stderr)
	}
}

// TestCheckConfigBridges: the bridges block's problems are printed like the others',
// each at its line under its own path.
func TestCheckConfigBridges(t *testing.T) {
	path := writeFile(t, "bridges.yaml", "bridges:\n  - name: up\n    address: 127.0.0.1\n    topics:\n"+
		"      - pattern: \"a/#/b\"\n        direction: sideways\n")
	code, _, stderr := runBinary(t, "check-config", "-c", path)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 1 || len(lines) != 3 ||
		!strings.HasPrefix(lines[0], path+":3: bridges[0].address: ") ||
		!strings.HasPrefix(lines[1], path+":5: bridges[0].topics[0].pattern: ") ||
		!strings.HasPrefix(lines[2], path+":6: bridges[0].topics[0].direction: ") {
		t.Fatalf("exit %d; stderr does not name each bridge field on its own line:\n%s", code, stderr)
	}
}

// TestClusterLinked: a valid cluster block is accepted by a build that links the cluster;
// the edge build (-tags bifrost_nocluster) refuses it, in check-config and at start, and
// says what to import.
func TestClusterLinked(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, "cluster.yaml", "store:\n  dir: \"off\"\nlisteners:\n  - type: tcp\n    address: 127.0.0.1:0\nhttp:\n  address: \"off\"\ncluster:\n  node_name: n1\n  bind: 127.0.0.1:0\n  rpc: 127.0.0.1:0\n  bootstrap_expect: 1\n  dir: "+dir+"\n")
	code, stdout, stderr := runBinary(t, "check-config", "-c", path)
	if clusterLinked {
		if code != 0 || stdout != path+": ok\n" {
			t.Fatalf("check-config: exit %d, stdout %q, stderr %q; want ok", code, stdout, stderr)
		}
		return
	}
	const want = `links no cluster: import _ "github.com/bifrost-mqtt/bifrost/cluster"`
	if code != 1 || !strings.Contains(stderr, path+": cluster: ") || !strings.Contains(stderr, want) {
		t.Fatalf("check-config: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	if code, _, stderr := runBinary(t, "-c", path); code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("serve: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}

func TestCheckConfigOK(t *testing.T) {
	path := writeFile(t, "ok.yaml", "log:\n  level: debug\n")
	code, stdout, stderr := runBinary(t, "check-config", "-c", path)
	if code != 0 || stdout != path+": ok\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0, %q", code, stdout, stderr, path+": ok\n")
	}
}

func TestCheckConfigMissingFlag(t *testing.T) {
	if code, _, stderr := runBinary(t, "check-config"); code != 2 || !strings.Contains(stderr, "-c FILE is required") {
		t.Fatalf("exit %d, stderr %q; want 2 and a usage message", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runBinary(t, "version")
	if want := "bifrost " + testVersion + " " + runtime.Version() + " "; code != 0 || !strings.HasPrefix(stdout, want) {
		t.Fatalf("exit %d, stdout %q; want 0 and prefix %q", code, stdout, want)
	}
}

func TestUnknownCommand(t *testing.T) {
	if code, _, stderr := runBinary(t, "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("exit %d, stderr %q; want 2", code, stderr)
	}
}

// TestBenchPointsAtBifrostBench: `bifrost bench` names the load tool's own command rather
// than running a load or failing as an unknown command.
func TestBenchPointsAtBifrostBench(t *testing.T) {
	if code, _, stderr := runBinary(t, "bench", "conns", "-n", "10"); code != 2 || !strings.Contains(stderr, "bifrost-bench MODE") {
		t.Fatalf("exit %d, stderr %q; want 2 and a pointer to bifrost-bench", code, stderr)
	}
}

// server is a running `bifrost serve` whose JSON log records arrive on logs.
type server struct {
	cmd     *exec.Cmd
	logs    chan map[string]any // closed when the process closes stderr
	exited  chan struct{}       // closed once Wait has returned
	waitErr error               // Wait's result, set before exited is closed
}

func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	return startCommand(t, exec.Command(binary.Path(t), args...))
}

// startCommand starts cmd, which runs the binary (perhaps through a wrapper), as a server.
func startCommand(t *testing.T, cmd *exec.Cmd) *server {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the test stops the server with SIGTERM")
	}
	s := &server{cmd: cmd, logs: make(chan map[string]any, 100), exited: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				rec = map[string]any{"msg": "not JSON: " + sc.Text()}
			}
			s.logs <- rec
		}
		close(s.logs)
		s.waitErr = s.cmd.Wait() // after the pipe is drained, as Wait requires
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default: // the test failed early
			_ = s.cmd.Process.Kill()
			for range s.logs {
			}
			<-s.exited
		}
	})
	return s
}

// waitLog returns the first log record with message msg, failing the test if the server
// exits or a generous deadline passes first.
func (s *server) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case rec, ok := <-s.logs:
			if !ok {
				t.Fatalf("server exited before logging %q", msg)
			}
			if rec["msg"] == msg {
				return rec
			}
			t.Logf("log: %v", rec)
		case <-deadline:
			t.Fatalf("no %q in the log after 30s", msg)
		}
	}
}

// signal sends sig to the server.
func (s *server) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the server to exit and returns its exit code.
func (s *server) wait(t *testing.T) int {
	t.Helper()
	deadline := time.After(30 * time.Second)
	logs := s.logs
	for {
		select {
		case rec, ok := <-logs:
			if ok {
				t.Logf("log: %v", rec)
			} else {
				logs = nil // stderr closed; now wait for the exit
			}
		case <-s.exited:
			if ee, ok := s.waitErr.(*exec.ExitError); ok {
				return ee.ExitCode()
			} else if s.waitErr != nil {
				t.Fatal(s.waitErr)
			}
			return 0
		case <-deadline:
			t.Fatal("server still running after 30s")
		}
	}
}

func TestServeStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			path := writeFile(t, "bifrost.yaml", "store:\n  dir: off\nlisteners:\n  - type: tcp\n    address: 127.0.0.1:0\n  - type: ws\n    address: 127.0.0.1:0\nhttp:\n  address: 127.0.0.1:0\nlog:\n  format: json\n")
			s := startServer(t, "-c", path)
			rec := s.waitLog(t, "http listening")
			addr, _ := rec["addr"].(string)
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
				t.Fatalf("/healthz = %d %q", resp.StatusCode, body)
			}
			http.DefaultClient.CloseIdleConnections()
			s.signal(t, sig)
			if code := s.wait(t); code != 0 {
				t.Fatalf("exit code %d after %v, want 0", code, sig)
			}
		})
	}
}

// TestServeReload edits the file and sends SIGHUP: a file with an error changes nothing
// and names the problem as check-config does; then a file that adds a listener, raises
// the log level and changes http.address applies the first two (the new listener accepts
// a client, the debug record the broker logs on shutdown proves the level) and names the
// third as needing a restart; every change is logged as field: old → new.
func TestServeReload(t *testing.T) {
	base := "store:\n  dir: off\nlisteners:\n  - type: tcp\n    address: 127.0.0.1:0\nhttp:\n  address: 127.0.0.1:0\nlog:\n  format: json\n"
	path := writeFile(t, "bifrost.yaml", base)
	s := startServer(t, "-c", path)
	s.waitLog(t, "http listening")

	if err := os.WriteFile(path, []byte(base+"mqtt:\n  max_qos: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.signal(t, syscall.SIGHUP)
	if rec := s.waitLog(t, "reload: nothing changed"); !strings.Contains(fmt.Sprint(rec["problem"]), path+":11: mqtt.max_qos") {
		t.Fatalf("refusal does not name file:line: field: %v", rec)
	}

	next := "store:\n  dir: off\nlisteners:\n  - type: tcp\n    address: 127.0.0.1:0\n  - name: extra\n    type: tcp\n    address: 127.0.0.1:0\n" +
		"http:\n  address: 127.0.0.1:1\nlog:\n  format: json\n  level: debug\n"
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	s.signal(t, syscall.SIGHUP)
	rec := s.waitLog(t, "mqtt listening")
	if rec["listener"] != "extra" {
		t.Fatalf("listening record = %v", rec)
	}
	conn, err := net.Dial("tcp", rec["addr"].(string))
	if err != nil {
		t.Fatalf("the added listener refuses: %v", err)
	}
	conn.Close()
	want := map[string]bool{`log.level: "info" → "debug"`: true, `listeners[extra]: (none) → tcp 127.0.0.1:0`: true}
	for len(want) > 0 {
		rec := s.waitLog(t, "reconfigure: applied")
		delete(want, fmt.Sprint(rec["change"]))
	}
	if rec := s.waitLog(t, "reconfigure: needs a restart; not applied"); !strings.HasPrefix(fmt.Sprint(rec["change"]), `http.address: "127.0.0.1:0" → "127.0.0.1:1"`) {
		t.Fatalf("restart record = %v", rec)
	}
	s.signal(t, syscall.SIGTERM)
	if rec := s.waitLog(t, "http endpoint shut down"); rec["level"] != "DEBUG" {
		t.Fatalf("shutdown record = %v", rec)
	}
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}
