package listener

import (
	"crypto/tls"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// pauseHandler counts the bytes it is given, each read counting as activity (as the
// broker's complete packets do), and reports opens and closes.
type pauseHandler struct {
	got    atomic.Int64
	opened chan Conn
	closed chan error
}

func (h *pauseHandler) OnOpen(c Conn) { h.opened <- c }
func (h *pauseHandler) OnData(c Conn, data []byte) {
	h.got.Add(int64(len(data)))
	c.Touch()
}
func (h *pauseHandler) OnClose(_ Conn, err error) { h.closed <- err }

// TestPauseReads checks that a paused connection is not read, so that its peer's writes
// are held by TCP, while writes to it go on and its idle timeout does not close it; and
// that once resumed what waited is read and the idle timeout counts again.
func TestPauseReads(t *testing.T) {
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerTLS} {
		t.Run(typ, func(t *testing.T) {
			h := &pauseHandler{opened: make(chan Conn, 1), closed: make(chan error, 1)}
			s := newTestServer(t, h, Options{})
			l := listen(t, s, typ)
			nc := dialTCP(t, l)
			if typ == conf.ListenerTLS {
				tc := tls.Client(nc, clientTLS())
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				nc = tc
			}
			c := recv(t, h.opened, "OnOpen")
			// Far shorter than the paused write's 3 s, and long enough that a loaded
			// machine's pause between two reads after the resume does not reach it.
			c.SetIdleTimeout(500 * time.Millisecond)
			c.(Pauser).PauseReads()

			// Writes to a paused connection go on.
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			var one [1]byte
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(nc, one[:]); err != nil || one[0] != 'x' {
				t.Fatalf("read from a paused connection's server: %q, %v", one[:], err)
			}

			// Its peer's writes are held once the socket buffers are full: a write far
			// larger than those cannot complete, however long it is given.
			const size = 64 << 20
			_ = nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
			n, err := nc.Write(make([]byte, size))
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a %d MiB write to a paused connection: %d bytes, %v; want it held (deadline exceeded)", size>>20, n, err)
			}
			if got := h.got.Load(); got >= int64(n) {
				t.Fatalf("%d bytes delivered of the %d written while paused", got, n)
			}
			// The idle timeout (500 ms) did not close it while it was paused.
			select {
			case err := <-h.closed:
				t.Fatalf("paused connection closed: %v", err)
			default:
			}

			c.(Pauser).ResumeReads()
			deadline := time.Now().Add(30 * time.Second)
			for h.got.Load() < int64(n) && time.Now().Before(deadline) {
				select {
				case err := <-h.closed:
					t.Fatalf("closed (%v) after the resume with %d of %d bytes delivered", err, h.got.Load(), n)
				case <-time.After(time.Millisecond):
				}
			}
			if got := h.got.Load(); got != int64(n) {
				t.Fatalf("after the resume %d bytes delivered, want the %d written", got, n)
			}
			// Nothing touches it now: the idle timeout closes it.
			if err := recv(t, h.closed, "OnClose"); !errors.Is(err, ErrIdleTimeout) {
				t.Fatalf("after the resume, closed with %v, want the idle timeout", err)
			}
		})
	}
}

// TestPauseClose checks that a paused connection can be closed.
func TestPauseClose(t *testing.T) {
	h := &pauseHandler{opened: make(chan Conn, 1), closed: make(chan error, 1)}
	s := newTestServer(t, h, Options{})
	l := listen(t, s, conf.ListenerTCP)
	dialTCP(t, l)
	c := recv(t, h.opened, "OnOpen")
	c.(Pauser).PauseReads()
	_ = c.Close()
	if err := recv(t, h.closed, "OnClose after Close"); err != nil {
		t.Fatalf("closed with %v, want nil", err)
	}
}
