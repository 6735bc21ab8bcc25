package listener

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// startChild starts a process that lives until the test ends, as a broker's process (or a
// test running mosquitto_pub in it) starts children.
func startChild(t *testing.T) *exec.Cmd {
	t.Helper()
	sleep := testenv.Command(t, "sleep", "coreutils")
	cmd := exec.Command(sleep, "60")
	if err := cmd.Start(); err != nil { // returns once the exec succeeded
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// socketsOf returns the socket inodes that process pid holds, as "socket:[ino]".
func socketsOf(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]bool)
	for _, e := range ents {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			m[link] = true
		}
	}
	return m
}

// TestChildInheritsNoConn: a child process must not inherit a connection's descriptor: it
// would keep the socket alive after the connection closed (and on an epoll loop that does
// not take a descriptor out before closing it, its events, which would then reach a new
// connection given the same number).
func TestChildInheritsNoConn(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		_ = dial(t, l)
		c := recv(t, r.opened, "OnOpen").(*conn)
		var st syscall.Stat_t
		if err := syscall.Fstat(sockFD(c), &st); err != nil {
			t.Fatal(err)
		}
		sock := fmt.Sprintf("socket:[%d]", st.Ino)
		child := startChild(t)
		if socketsOf(t, child.Process.Pid)[sock] {
			t.Fatalf("the child process holds the connection's socket %s", sock)
		}
		if !socketsOf(t, os.Getpid())[sock] {
			t.Fatalf("test broken: this process does not hold %s", sock)
		}
	})
}
