package interop_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"go.yaml.in/yaml/v3"
)

// The command-line peers run against the bifrost binary in a process of its own, as a
// deployment runs it, rather than against a broker inside the test process: the test
// process starts a child for every mosquitto_pub, and a child holds copies of all of its
// parent's descriptors between fork and exec. A connection the broker closes in that
// window keeps its socket alive in the child, and an event loop that does not remove a
// descriptor from epoll before closing it may then see that socket's events under a
// number the kernel has already given to a new connection. A broker that starts no child
// processes never meets this; TestMosquittoChildProcessFDs keeps the embedded case covered.

// mqBinary is cmd/bifrost, built once per test binary with its engine's and cluster's tags.
var mqBinary = &testenv.Binary{Pkg: "github.com/bifrost-mqtt/bifrost/cmd/bifrost",
	Flags: []string{"-tags", strings.Trim(brokerTags+","+clusterTags+","+pebbleTags, ",")}}

func TestMain(m *testing.M) {
	code := m.Run()
	mqBinary.Cleanup()
	os.Exit(code)
}

// mqBuild returns the built cmd/bifrost.
func mqBuild(t testing.TB) string { return mqBinary.Path(t) }

var (
	mqListenRE = regexp.MustCompile(`msg="mqtt listening" listener=(\S+) type=\S+ addr=(\S+)`)
	mqHTTPRE   = regexp.MustCompile(`msg="http listening" addr=(\S+)`)
)

// mqStartProcess runs the bifrost binary with the config mqStart would use (edit applied),
// reads the addresses it listens on from its log, and stops it with SIGTERM when t ends.
func mqStartProcess(t testing.TB, edit func(*bifrost.Config)) *mqBroker {
	t.Helper()
	bin := mqBuild(t)
	cfg := mqConfig(t, edit)
	cfg.Log.Format = "text"
	if cfg.Store.EngineDefaulted {
		cfg.Store.Engine = "" // as a file that sets none: the binary's build chooses
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bifrost.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &mqLogs{}
	mb := &mqBroker{logs: logs}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		announced := false
		for sc.Scan() {
			line := sc.Text()
			logs.Write([]byte(line + "\n"))
			if announced {
				continue
			}
			if m := mqListenRE.FindStringSubmatch(line); m != nil {
				switch m[1] {
				case "tcp":
					mb.tcp = m[2]
				case "ws":
					mb.ws = m[2]
				}
			}
			if m := mqHTTPRE.FindStringSubmatch(line); m != nil {
				mb.http = m[1]
				announced = true
				close(ready) // the HTTP endpoint is announced after every listener
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan error, 1)
		go func() { <-done; exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("bifrost exited: %v", err)
			}
		case <-time.After(testenv.Timeout):
			_ = cmd.Process.Kill()
			t.Errorf("bifrost did not stop within %s of SIGTERM", testenv.Timeout)
		}
		if t.Failed() {
			t.Logf("broker log:\n%s", logs)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	select {
	case <-ready:
	case <-done:
		t.Fatalf("bifrost exited before listening:\n%s", logs)
	case <-ctx.Done():
		t.Fatalf("bifrost did not announce its listeners:\n%s", logs)
	}
	return mb
}
