package crash

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

var restoreRE = regexp.MustCompile(`msg="store: state restored".* took=(\S+)`)

// proc is a running broker process: the address its MQTT listener took and how long
// restoring the store took, both read from its log.
type proc struct {
	*testenv.Proc
	addr    string
	restore time.Duration
}

// startBroker runs the binary on the config at path and waits, up to limit, for it to
// listen.
func startBroker(t testing.TB, path string, limit time.Duration) *proc {
	t.Helper()
	p := &proc{}
	p.Proc = testenv.StartProc(t, exec.Command(binary.Path(t), "-c", path), limit, func(line string) bool {
		if m := restoreRE.FindStringSubmatch(line); m != nil {
			p.restore, _ = time.ParseDuration(m[1])
		}
		a, ok := testenv.MQTTAddr(line)
		if ok {
			p.addr = a
		}
		return ok
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() { p.Stop(syscall.SIGKILL, testenv.Timeout) }

// stop sends SIGTERM and waits, up to limit, for a clean exit.
func (p *proc) stop(t testing.TB, limit time.Duration) {
	t.Helper()
	if !p.Stop(syscall.SIGTERM, limit) {
		t.Errorf("broker still running %v after SIGTERM", limit)
	} else if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("broker exited with %d after SIGTERM:\n%s", code, p.Log())
	}
}
