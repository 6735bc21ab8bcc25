package listener

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestWriteFence: once Options.WriteFence says no, an admitted connection (SetIdleTimeout
// called) gets nothing more, not even the bytes queued for it before (they are dropped),
// and is closed with ErrWriteFenced; a later write fails. A connection not admitted is
// written to as ever (a CONNACK refusing a client).
func TestWriteFence(t *testing.T) {
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerTLS} {
		t.Run(typ, func(t *testing.T) {
			var open atomic.Bool
			open.Store(true)
			r := newRecorder(t)
			l := listen(t, newTestServer(t, r, Options{WriteFence: open.Load}), typ)
			dial := func() net.Conn {
				if typ == conf.ListenerTLS {
					c, err := tlsDial(t, l, clientTLS())
					if err != nil {
						t.Fatal(err)
					}
					return c
				}
				return dialTCP(t, l)
			}

			refused := dial()
			rc := recv(t, r.opened, "the first connection")
			open.Store(false)
			if _, err := rc.Write([]byte("refused")); err != nil {
				t.Fatalf("a write to a connection not admitted, fenced: %v", err)
			}
			if got := readN(t, refused, len("refused")); string(got) != "refused" {
				t.Fatalf("the connection not admitted read %q", got)
			}
			open.Store(true)

			client := dial()
			c := recv(t, r.opened, "the second connection")
			c.SetIdleTimeout(time.Minute)
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if got := readN(t, client, 5); string(got) != "hello" {
				t.Fatalf("read %q before the fence", got)
			}
			// The client reads nothing for now: fill the socket until bytes wait in the
			// connection's queue, then queue a marker behind them.
			chunk := bytes.Repeat([]byte("a"), 64<<10)
			for sent := 0; c.Buffered() == 0; sent += len(chunk) {
				if sent > 256<<20 {
					t.Fatalf("%d bytes written and none queued", sent)
				}
				if _, err := c.Write(chunk); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Write(bytes.Repeat([]byte("Z"), 1024)); err != nil {
				t.Fatal(err)
			}
			open.Store(false)
			// Reading makes room: the queue would go out now, but the fence drops it and
			// closes the connection (the read ends with EOF or a reset, either way).
			_ = client.SetReadDeadline(time.Now().Add(testenv.Timeout))
			got, _ := io.ReadAll(client)
			if i := bytes.IndexByte(got, 'Z'); i >= 0 {
				t.Fatalf("the client read bytes queued before the fence closed, at %d of %d", i, len(got))
			}
			if ev := recv(t, r.closed, "the fenced connection's close"); ev.c != c || !errors.Is(ev.err, ErrWriteFenced) {
				t.Errorf("OnClose of %v got %v; want ErrWriteFenced for %v", ev.c.RemoteAddr(), ev.err, c.RemoteAddr())
			}
			if _, err := c.Write([]byte("later")); err == nil {
				t.Error("a write after the fence succeeded")
			}
		})
	}
}

// readN reads n bytes from r, failing the test on an error.
func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return b
}
