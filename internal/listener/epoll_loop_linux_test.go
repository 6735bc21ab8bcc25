//go:build linux && !bifrost_portable

package listener

import (
	"net"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// What the tests expect of the epoll engine where the engines differ (the portable
// engine's: portable_engine_test.go).

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
	// 6,778 without lending (tls_input.go; TestTLSInputLent says whether it works).
	tlsBudget := 4096.0
	if !tlsLending {
		tlsBudget = 8192
	}
	return map[string]float64{conf.ListenerTCP: 200, conf.ListenerWS: 200,
		conf.ListenerTLS: tlsBudget, conf.ListenerWSS: tlsBudget}[typ], true
}

// sockFD returns the descriptor of c's socket.
func sockFD(c *conn) int { return int(c.fd) }

// TestSockOptsInherited: Linux copies a listening socket's options to the sockets it
// accepts, which is what lets the epoll engine set them once per listener rather than with
// five setsockopt(2) calls per connection; sockOpts.apply sees it on the first socket.
func TestSockOptsInherited(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	setSockOpts(int(f.Fd()))
	for i := range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fd, _, err := syscall.Accept4(int(f.Fd()), syscall.SOCK_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		var o sockOpts
		o.apply(fd)
		if !o.inherited {
			t.Fatalf("accepted socket %d does not carry the listening socket's options", i)
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

// TestSockOpts: sockets accepted by our loop get what Go gives its own TCP connections
// (and so the portable engine's): TCP_NODELAY (without it closed-loop QoS 0 traffic
// waited 40 ms per round on delayed ACKs) and TCP keepalive.
func TestSockOpts(t *testing.T) {
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerWS} {
		r := newRecorder(t)
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		for i := range 2 { // the first socket is checked, the next ones inherit unchecked
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
				{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
				{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
			} {
				if got, err := syscall.GetsockoptInt(int(c.fd), o.level, o.opt); err != nil || got != o.want {
					t.Errorf("%s, connection %d: %s = %d (%v), want %d", typ, i, o.name, got, err, o.want)
				}
			}
		}
	}
}
