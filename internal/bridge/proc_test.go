package bridge

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

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

// A proc is a running bifrost process and the address its MQTT listener took.
type proc struct {
	*testenv.Proc
	addr string
}

// startProc runs bifrost on the config at path and returns once it listens.
func startProc(t testing.TB, path string) *proc {
	t.Helper()
	p := &proc{}
	p.Proc = testenv.StartProc(t, exec.Command(bifrostBin.Path(t), "-c", path), testenv.Timeout, func(line string) bool {
		a, ok := testenv.MQTTAddr(line)
		if ok {
			p.addr = a
		}
		return ok
	})
	return p
}

// signal sends sig to the process (by its PID) and waits for it to exit.
func (p *proc) signal(sig syscall.Signal) { p.Stop(sig, testenv.Timeout) }
