package crash

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestStoreInUse starts a second broker process on the store directory a first one holds:
// it must exit 1 before listening, saying that the directory is held by another process,
// which one (the first broker's pid and command name) and what to do, rather than Pebble's
// "resource temporarily unavailable". Once the first has stopped, the second starts.
func TestStoreInUse(t *testing.T) {
	dir := t.TempDir()
	first := startBroker(t, config(t, dir, conf.SyncAlways), 30*time.Second)
	defer first.kill()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary.Path(t), "-c", config(t, dir, conf.SyncAlways)).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("second broker on the same store: %v, want exit status 1; output:\n%s", err, out)
	}
	for _, want := range []string{
		"start failed", "store: directory in use", dir + " is held by another process",
		"(pid " + strconv.Itoa(first.Cmd.Process.Pid) + ", bifrost)", "stop that process, or set store.dir to another directory",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the second broker's output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "mqtt listening") {
		t.Errorf("the second broker listened before failing:\n%s", out)
	}

	first.stop(t, 30*time.Second)
	second := startBroker(t, config(t, dir, conf.SyncAlways), 30*time.Second)
	second.stop(t, 30*time.Second)
}
