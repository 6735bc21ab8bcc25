package crash

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// binary is the bifrost command, built once.
var binary = &testenv.Binary{Pkg: "github.com/bifrost-mqtt/bifrost/cmd/bifrost"}

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Cleanup()
	os.Exit(code)
}

// config is the broker's config file for a store in dir with the sync policy sync and
// the profile's engine: one
// TCP listener on a free loopback port, no HTTP, no $SYS, offline queues large enough
// that nothing the test sends overflows them.
func config(t testing.TB, dir, sync string) string {
	return configEngine(t, dir, sync, "")
}

// configEngine is config with store.engine: engine, unless engine is "".
func configEngine(t testing.TB, dir, sync, engine string) string {
	t.Helper()
	if engine != "" {
		engine = "\n  engine: " + engine
	}
	yaml := fmt.Sprintf(`listeners:
  - name: mqtt
    type: tcp
    address: 127.0.0.1:0
http:
  address: "off"
store:
  dir: %q
  sync: %s
  sync_interval: 100ms%s
sys_interval: 0s
queue:
  offline_messages: 100000000
  offline_bytes: 4GiB
log:
  level: info
  format: text
`, dir, sync, engine)
	path := filepath.Join(t.TempDir(), "bifrost.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	listenRE  = regexp.MustCompile(`msg="mqtt listening" listener=\S+ type=\S+ addr=(\S+)`)
	restoreRE = regexp.MustCompile(`msg="store: state restored".* took=(\S+)`)
)

// proc is a running broker process.
type proc struct {
	cmd     *exec.Cmd
	addr    string
	restore time.Duration // how long restoring the store took, from its log
	done    chan struct{} // closed when the process has exited
	mu      sync.Mutex
	log     strings.Builder
}

// startBroker runs the binary on the config at path and waits, up to limit, for it to
// listen.
func startBroker(t testing.TB, path string, limit time.Duration) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary.Path(t), "-c", path), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			if m := restoreRE.FindStringSubmatch(line); m != nil {
				p.restore, _ = time.ParseDuration(m[1])
			}
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case p.addr = <-ready:
		return p
	case <-p.done:
		t.Fatalf("broker exited before listening:\n%s", p.logs())
	case <-time.After(limit):
		p.kill()
		t.Fatalf("broker not listening after %v:\n%s", limit, p.logs())
	}
	return nil
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits, up to limit, for a clean exit.
func (p *proc) stop(t testing.TB, limit time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("broker exited with %d after SIGTERM:\n%s", code, p.logs())
		}
	case <-time.After(limit):
		p.kill()
		t.Errorf("broker still running %v after SIGTERM", limit)
	}
}
