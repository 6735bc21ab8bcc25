package listener

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestAdmit: a connection the Admit hook refuses is closed before any work is spent on it
// (no handler call, no TLS handshake), and one it admits goes on as usual.
func TestAdmit(t *testing.T) {
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerTLS} {
		t.Run(typ, func(t *testing.T) {
			var refuse atomic.Bool
			var asked atomic.Int64
			h := &counter{}
			s := newTestServer(t, h, Options{Admit: func(l *Listener, remote netip.Addr) bool {
				asked.Add(1)
				if remote != netip.AddrFrom4([4]byte{127, 0, 0, 1}) || l == nil {
					t.Errorf("Admit(%v, %v): want the listener and the client's address, 127.0.0.1", l, remote)
				}
				return !refuse.Load()
			}})
			l := listen(t, s, typ)
			dial := func() (net.Conn, error) {
				if typ == conf.ListenerTLS {
					d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: clientTLS()}
					return d.Dial("tcp", l.Addr().String())
				}
				return net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
			}

			refuse.Store(true)
			c, err := dial()
			if err == nil {
				// TCP connects before the accept: the broker's side closes it at once.
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, rerr := c.Read(make([]byte, 1)); rerr != io.EOF {
					t.Fatalf("refused connection: read %v, want EOF", rerr)
				}
				c.Close()
			} else if typ != conf.ListenerTLS {
				t.Fatal(err)
			}
			if running, _, _ := s.TLSHandshakes(); running != 0 {
				t.Fatalf("%d handshakes running for a refused connection", running)
			}
			if h.opened.Load() != 0 {
				t.Fatal("OnOpen called for a refused connection")
			}

			refuse.Store(false)
			c, err = dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			testenv.WaitFor(t, "the admitted connection", func() bool { return h.open() == 1 })
			if asked.Load() != 2 {
				t.Fatalf("Admit asked %d times, want 2", asked.Load())
			}
		})
	}
}
