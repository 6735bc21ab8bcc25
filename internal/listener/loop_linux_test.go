package listener

import (
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
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
