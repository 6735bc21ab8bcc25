package bridge

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

// bifrostBin is the bifrost command, built once, for the tests that run it as a process.
var bifrostBin = &testenv.Binary{Pkg: "github.com/bifrost-mqtt/bifrost/cmd/bifrost"}

func TestMain(m *testing.M) {
	code := m.Run()
	bifrostBin.Cleanup()
	os.Exit(code)
}

// procConfig writes a config for a bifrost process: one loopback TCP listener on a free
// port, no HTTP, no $SYS, a store in dir under sync always with engine, and the bridge
// yaml block given (indented as a list item under bridges:).
func procConfig(t testing.TB, dir, engine, bridge string) string {
	t.Helper()
	yaml := fmt.Sprintf(`listeners:
  - name: mqtt
    type: tcp
    address: 127.0.0.1:0
http:
  address: "off"
store:
  dir: %q
  engine: %s
  sync: always
sys_interval: 0s
log:
  level: info
  format: text
bridges:
%s`, dir, engine, bridge)
	path := filepath.Join(t.TempDir(), "bifrost.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var listenRE = regexp.MustCompile(`msg="mqtt listening" listener=\S+ type=\S+ addr=(\S+)`)

// A proc is a running bifrost process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed when the process has exited
	mu   sync.Mutex
	log  strings.Builder
}

// startProc runs bifrost on the config at path and returns once it listens.
func startProc(t testing.TB, path string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bifrostBin.Path(t), "-c", path), done: make(chan struct{})}
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
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("bifrost log:\n%s", p.logs())
		}
	})
	select {
	case p.addr = <-ready:
		return p
	case <-p.done:
		t.Fatalf("bifrost exited before listening:\n%s", p.logs())
	case <-time.After(testenv.Timeout):
		t.Fatalf("bifrost not listening after %v:\n%s", testenv.Timeout, p.logs())
	}
	return nil
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// signal sends sig to the process (by its PID) and waits for it to exit.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(testenv.Timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
