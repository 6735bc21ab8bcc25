package listener

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestSockOpts: sockets accepted by our loop get what Go gives its own TCP connections:
// TCP_NODELAY (without it closed-loop QoS 0 traffic waited 40 ms per round on delayed
// ACKs) and TCP keepalive.
func TestSockOpts(t *testing.T) {
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerWS} {
		r := newRecorder(t)
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		_ = dial(t, l)
		c := recv(t, r.opened, "OnOpen").(*conn)
		for _, o := range []struct {
			name       string
			level, opt int
			want       int
		}{
			{"TCP_NODELAY", syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
			{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
			{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
		} {
			if got, err := syscall.GetsockoptInt(c.fdNum(), o.level, o.opt); err != nil || got != o.want {
				t.Errorf("%s: %s = %d (%v), want %d", typ, o.name, got, err, o.want)
			}
		}
	}
}

// upgradesHeld returns the ws connections whose state a poller still holds, once the
// Server is closed (its pollers have exited).
func upgradesHeld(s *Server) int {
	n := 0
	if s.loop != nil {
		for _, p := range s.loop.pollers {
			n += len(p.ws)
		}
	}
	return n
}

// openWriteRefused: our loop queues what OnOpen wrote; it refuses nothing.
func openWriteRefused(error) bool { return false }

// TestNoNbio: on Linux every transport runs on our own loop, so the broker links no nbio
// package (nbio's WebSocket package alone keeps a 1 MiB task pool resident in every
// process that links it). Asked of the go command: a test binary carries no module list.
func TestNoNbio(t *testing.T) {
	gocmd := testenv.Command(t, "go", "the Go toolchain")
	cmd := exec.Command(gocmd, "list", "-deps", "github.com/bifrost-mqtt/bifrost/cmd/bifrost")
	cmd.Env = append(os.Environ(), "GOOS=linux")
	out, err := cmd.Output()
	testenv.Need(t, err == nil, fmt.Sprintf("a working go list of the broker's packages (%v)", err))
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/lesismal/") {
			t.Errorf("%s is linked on Linux", pkg)
		}
	}
}

// TestTLSConnLayout guards conn.tls(), which converts a *conn of a tls or wss listener to
// its *tlsConn: that is only sound while conn is tlsConn's first field.
func TestTLSConnLayout(t *testing.T) {
	if off := unsafe.Offsetof(tlsConn{}.conn); off != 0 {
		t.Fatalf("conn is at offset %d in tlsConn, want 0 (conn.tls() depends on it)", off)
	}
}
