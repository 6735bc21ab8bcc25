//go:build linux && !bifrost_portable

package listener

import (
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
)

// What the tests expect of the epoll engine where the engines differ (the portable
// engine's: engine_portable_test.go).

// connSize is the size of a conn on 64-bit platforms.
const connSize = 88

// goroutinesPerConn is the goroutines an idle connection holds: none.
const goroutinesPerConn = 0

// engineGoroutines returns the goroutines of ours the engine runs for s with conns
// connections open and idle: its pollers.
func engineGoroutines(s *Server, _ int) int32 { return int32(s.o.Pollers) }

// idleHeapBudget returns the most live heap an idle connection of type typ may cost the
// listener, and whether that is checked (it is, on the epoll engine).
func idleHeapBudget(typ string) (float64, bool) {
	// tls, wss: measured on Go 1.26 (amd64, AES-GCM), 3,209 and 3,203 bytes; 6,778 and
	// 6,778 without lending (tlsinput.go; TestTLSInputLent says whether it works).
	tlsBudget := 4096.0
	if !tlsLending {
		tlsBudget = 8192
	}
	return map[string]float64{conf.ListenerTCP: 200, conf.ListenerWS: 200,
		conf.ListenerTLS: tlsBudget, conf.ListenerWSS: tlsBudget}[typ], true
}

// sockFD returns the descriptor of c's socket.
func sockFD(c *conn) int { return int(c.fd) }

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

// TestSockOpts: sockets accepted by our loop get what Go gives its own TCP connections
// (and so the portable engine's): TCP_NODELAY (without it closed-loop QoS 0 traffic
// waited 40 ms per round on delayed ACKs) and TCP keepalive.
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
			if got, err := syscall.GetsockoptInt(int(c.fd), o.level, o.opt); err != nil || got != o.want {
				t.Errorf("%s: %s = %d (%v), want %d", typ, o.name, got, err, o.want)
			}
		}
	}
}
