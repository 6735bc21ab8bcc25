package store

import (
	"bufio"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// holdDirEnv tells TestHoldChild which directory to hold.
const (
	holdDirEnv    = "BIFROST_STORE_HOLD_DIR"
	holdEngineEnv = "BIFROST_STORE_HOLD_ENGINE"
)

// TestOpenInUseByThisProcess: a directory an open store holds is refused to a second Open
// in the same process, however its path is spelled, with ErrInUse; once the first store
// is closed it opens.
func TestOpenInUseByThisProcess(t *testing.T) { forEngines(t, testOpenInUseByThisProcess) }

func testOpenInUseByThisProcess(t *testing.T, engine string) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	first := openTest(t, engine, dir, conf.SyncAlways, nil)
	for _, spelling := range []string{dir, dir + "/.", filepath.Join(dir, "..", filepath.Base(dir)), link} {
		s, err := openHooked(testConfigEngine(engine, spelling, conf.SyncAlways), testLogger(t), nil)
		if err == nil {
			_ = s.Close()
			t.Fatalf("open %s while %s is open: no error", spelling, dir)
		}
		if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "already open in this process") {
			t.Fatalf("open %s while %s is open: %v, want ErrInUse saying it is open in this process", spelling, dir, err)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := openHooked(testConfigEngine(engine, link, conf.SyncAlways), testLogger(t), nil)
	if err != nil {
		t.Fatalf("open after the first store closed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenInUseByAnotherProcess: a directory another process holds is refused with
// ErrInUse naming that process's pid (and, on Linux, its command name), not with Pebble's
// "resource temporarily unavailable"; once that process lets go, it opens.
func TestOpenInUseByAnotherProcess(t *testing.T) { forEngines(t, testOpenInUseByAnotherProcess) }

func testOpenInUseByAnotherProcess(t *testing.T, engine string) {
	switch runtime.GOOS {
	case "linux", "darwin", "dragonfly", "freebsd", "netbsd", "openbsd":
	default:
		t.Skip("the lock's holder is found with fcntl F_GETLK")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdDirEnv+"="+dir, holdEngineEnv+"="+engine)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "holding" {
	}
	if sc.Err() != nil || sc.Text() != "holding" {
		t.Fatalf("the child did not open the store: %v", sc.Err())
	}

	_, err = openHooked(testConfigEngine(engine, dir, conf.SyncAlways), testLogger(t), nil)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("open while another process holds the store: %v, want ErrInUse", err)
	}
	msg := err.Error()
	want := []string{dir, "held by another process", "pid " + strconv.Itoa(cmd.Process.Pid), "set store.dir"}
	if runtime.GOOS == "linux" {
		comm := filepath.Base(os.Args[0])
		want = append(want, comm[:min(len(comm), 15)]) // the kernel keeps 15 bytes of it
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}

	_ = stdin.Close() // the child closes its store and exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	s, err := openHooked(testConfigEngine(engine, dir, conf.SyncAlways), testLogger(t), nil)
	if err != nil {
		t.Fatalf("open after the other process exited: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHoldChild is TestOpenInUseByAnotherProcess's child: it opens the store in the
// directory it is given, says "holding", and closes it when its standard input ends.
func TestHoldChild(t *testing.T) {
	dir := os.Getenv(holdDirEnv)
	if dir == "" {
		t.Skip("run by TestOpenInUseByAnotherProcess")
	}
	s, err := openHooked(testConfigEngine(os.Getenv(holdEngineEnv), dir, conf.SyncAlways), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("holding\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
