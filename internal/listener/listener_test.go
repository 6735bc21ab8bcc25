package listener

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/coder/websocket"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// transports runs f once per transport.
func transports(t *testing.T, f func(t *testing.T, typ string)) {
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerWS, conf.ListenerTLS, conf.ListenerWSS} {
		t.Run(typ, func(t *testing.T) { f(t, typ) })
	}
}

// client is a connected test client of any transport, speaking in payload bytes.
type client struct {
	net.Conn              // the stream: the socket, or the TLS connection over it
	raw      *net.TCPConn // the socket
	ws       *wsClient    // nil for TCP and TLS
}

func dial(t testing.TB, l *Listener) *client {
	t.Helper()
	raw := dialTCP(t, l)
	c := &client{Conn: raw, raw: raw.(*net.TCPConn)}
	if l.kind&kindSecure != 0 {
		tc := tls.Client(raw, clientTLS())
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		c.Conn = tc
	}
	if l.kind&kindWeb != 0 {
		ws, res, err := wsHandshake(c.Conn, "/mqtt", "mqtt")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %s", res.Status)
		}
		c.ws = ws
	}
	return c
}

// recordOverhead is the most that TLS adds to n bytes written in writes of at most chunk
// bytes: per 16 KiB record, a header, an explicit nonce (1.2) and a tag, or a content type (1.3).
func recordOverhead(kind uint8, n, chunk int) int {
	if kind&kindSecure == 0 {
		return 0
	}
	return (n/chunk + 1) * (chunk/(1<<14) + 1) * (5 + 8 + 16 + 1)
}

// send sends p as payload: raw bytes on TCP, one binary message on WebSocket.
func (c *client) send(t testing.TB, p []byte) {
	t.Helper()
	if c.ws != nil {
		c.ws.send(t, p)
		return
	}
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
}

// recv reads exactly n payload bytes.
func (c *client) recv(t testing.TB, n int) []byte {
	t.Helper()
	var got []byte
	for len(got) < n {
		if c.ws != nil {
			got = append(got, c.ws.readMessage(t)...)
			continue
		}
		b := make([]byte, n-len(got))
		k, err := c.Read(b)
		if err != nil {
			t.Fatalf("read after %d of %d bytes: %v", len(got), n, err)
		}
		got = append(got, b[:k]...)
	}
	return got
}

// expectEnd reads until the server ends the stream and checks that it ended cleanly: a
// FIN (io.EOF), not a reset; on WebSocket after a close frame with status 1000.
func (c *client) expectEnd(t testing.TB) {
	t.Helper()
	if c.ws != nil {
		op, _, p, err := c.ws.readFrame()
		if err != nil {
			t.Fatalf("reading the close frame: %v", err)
		}
		if op != wsClose || len(p) < 2 || p[0] != 0x03 || p[1] != 0xE8 {
			t.Fatalf("got opcode %d payload %x, want a close frame with status 1000", op, p)
		}
		if _, err := c.ws.r.ReadByte(); err != io.EOF {
			t.Fatalf("after the close frame: %v, want EOF", err)
		}
		return
	}
	b, err := io.ReadAll(c)
	if err != nil || len(b) > 0 {
		t.Fatalf("read %d more bytes and %v, want a clean EOF", len(b), err)
	}
}

// TestConnSize: every idle connection pays for its conn: on 64-bit platforms 88 bytes on
// the epoll engine, 96 on the portable one, both the 96-byte size class.
func TestConnSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes for 64-bit platforms")
	}
	if n := unsafe.Sizeof(conn{}); n != connSize {
		t.Errorf("conn is %d bytes, want %d: every idle connection pays for it", n, connSize)
	}
}

func TestListenErrors(t *testing.T) {
	s := newTestServer(t, newRecorder(t), Options{})
	for _, cfg := range []conf.Listener{
		{Type: conf.ListenerTLS, Address: "127.0.0.1:0"},
		{Type: conf.ListenerWSS, Address: "127.0.0.1:0"},
		{Type: "quic", Address: "127.0.0.1:0"},
		{Type: conf.ListenerWS, Address: "127.0.0.1:0", Path: "mqtt"},
		{Type: conf.ListenerTCP, Address: "127.0.0.1:99999"},
	} {
		if l, err := s.Listen(cfg); err == nil {
			t.Errorf("Listen(%+v) = %v, want an error", cfg, l.Addr())
		} else {
			t.Logf("Listen(%s %s %q): %v", cfg.Type, cfg.Address, cfg.Path, err)
		}
	}
	l := listen(t, s, conf.ListenerTCP)
	if _, err := s.Listen(conf.Listener{Type: conf.ListenerTCP, Address: l.Addr().String()}); err == nil {
		t.Error("a second listener on a port in use: no error")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Listen(conf.Listener{Type: conf.ListenerTCP, Address: "127.0.0.1:0"}); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Listen after Close: %v, want ErrServerClosed", err)
	}
}

// TestSeveralListeners runs six listeners of the four types in one Server.
func TestSeveralListeners(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	var ls []*Listener
	for i, cfg := range []conf.Listener{
		{Name: "tcp-a", Type: conf.ListenerTCP},
		{Name: "tcp-b", Type: conf.ListenerTCP},
		{Name: "ws-a", Type: conf.ListenerWS},
		{Name: "ws-b", Type: conf.ListenerWS, Path: "/other"},
		{Name: "tls-a", Type: conf.ListenerTLS},
		{Name: "wss-a", Type: conf.ListenerWSS},
	} {
		cfg.Address = "127.0.0.1:0"
		if cfg.Type == conf.ListenerTLS || cfg.Type == conf.ListenerWSS {
			cfg.TLS = tlsFiles(t, false)
		}
		l, err := s.Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if l.Name() != cfg.Name || l.Type() != cfg.Type {
			t.Errorf("listener %d: name %q type %q", i, l.Name(), l.Type())
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		var c *client
		if l.path == "/other" {
			raw := dialTCP(t, l)
			ws, res, err := wsHandshake(raw, "/other", "mqtt")
			if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("%s: upgrade on /other: %v %v", l.Name(), res.Status, err)
			}
			c = &client{Conn: raw, ws: ws}
		} else {
			c = dial(t, l)
		}
		sc := recv(t, r.opened, "OnOpen")
		if sc.Listener() != l {
			t.Errorf("connection to %s reports listener %s", l.Name(), sc.Listener().Name())
		}
		if l.Conns() != 1 {
			t.Errorf("%s: Conns() = %d, want 1", l.Name(), l.Conns())
		}
		msg := []byte("hello " + l.Name())
		c.send(t, msg)
		if got := c.recv(t, len(msg)); !bytes.Equal(got, msg) {
			t.Errorf("%s: echo %q, want %q", l.Name(), got, msg)
		}
		if sc.LocalAddr().String() != l.Addr().String() || sc.RemoteAddr().String() != c.LocalAddr().String() {
			t.Errorf("%s: addresses %v %v", l.Name(), sc.LocalAddr(), sc.RemoteAddr())
		}
		_ = c.Close()
		ev := recv(t, r.closed, "OnClose")
		if ev.c != sc || !errors.Is(ev.err, io.EOF) {
			t.Errorf("%s: OnClose(%v), want io.EOF", l.Name(), ev.err)
		}
		testenv.WaitFor(t, l.Name()+" Conns() == 0", func() bool { return l.Conns() == 0 })
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.checkAllClosedOnce(t)
}

// TestDataInOrder sends a stream in random pieces and expects it whole and in order.
func TestDataInOrder(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		s := newTestServer(t, r, Options{ReadBufferSize: 4096}) // several reads per piece
		l := listen(t, s, typ)
		c := dial(t, l)
		sc := recv(t, r.opened, "OnOpen")
		want := randomBytes(300 << 10)
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+rand.IntN(20000))
			c.send(t, rest[:n])
			rest = rest[n:]
		}
		testenv.WaitFor(t, "all bytes", func() bool { return len(r.received(sc)) >= len(want) })
		if got := r.received(sc); !bytes.Equal(got, want) {
			t.Fatalf("received %d bytes that differ from the %d sent", len(got), len(want))
		}
	})
}

// webTransports runs f for ws and wss.
func webTransports(t *testing.T, f func(t *testing.T, typ string)) {
	for _, typ := range []string{conf.ListenerWS, conf.ListenerWSS} {
		t.Run(typ, func(t *testing.T) { f(t, typ) })
	}
}

// TestWSFrameSplits dribbles frames byte by byte and sends a fragmented message: the
// payloads arrive whole and in order.
func TestWSFrameSplits(t *testing.T) { webTransports(t, testWSFrameSplits) }

func testWSFrameSplits(t *testing.T, typ string) {
	r := newRecorder(t)
	s := newTestServer(t, r, Options{})
	l := listen(t, s, typ)
	c := dial(t, l).ws
	sc := recv(t, r.opened, "OnOpen")
	var want []byte
	one := frame(true, wsBinary, []byte("split across segments"))
	for i := range one {
		if _, err := c.Write(one[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "split across segments"...)
	frag := append(frame(false, wsBinary, []byte("frag-1|")), frame(false, 0, []byte("frag-2|"))...)
	frag = append(frag, frame(true, 0, []byte("frag-3"))...)
	if _, err := c.Write(frag); err != nil {
		t.Fatal(err)
	}
	want = append(want, "frag-1|frag-2|frag-3"...)
	big := randomBytes(70000) // a 64-bit length
	c.send(t, big)
	want = append(want, big...)
	testenv.WaitFor(t, "all payload", func() bool { return len(r.received(sc)) >= len(want) })
	if got := r.received(sc); !bytes.Equal(got, want) {
		t.Fatalf("received %q..., want %q...", got[:40], want[:40])
	}
}

// TestWritev checks that Writev sends its buffers in order, as one message on WebSocket.
func TestWritev(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		r.data = func(c Conn, data []byte) {
			bufs := [][]byte{[]byte("head|"), nil, data, []byte("|tail")}
			if n, err := c.Writev(bufs); n != len(data)+10 || err != nil {
				t.Errorf("Writev = %d, %v", n, err)
			}
		}
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		c := dial(t, l)
		c.send(t, []byte("body"))
		if c.ws != nil {
			if got := c.ws.readMessage(t); string(got) != "head|body|tail" {
				t.Fatalf("message %q", got)
			}
			return
		}
		if got := c.recv(t, 14); string(got) != "head|body|tail" {
			t.Fatalf("bytes %q", got)
		}
	})
}

// TestBuffered queues more than the socket takes, then lets the client read it all.
func TestBuffered(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		var queued atomic.Int64
		r.data = func(c Conn, _ []byte) { queued.Store(int64(writeBurst(t, c))) }
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		c := dial(t, l)
		sc := recv(t, r.opened, "OnOpen")
		if sc.Buffered() != 0 {
			t.Fatalf("Buffered() = %d before any write", sc.Buffered())
		}
		c.send(t, []byte("go"))
		testenv.WaitFor(t, "the writes", func() bool { return queued.Load() != 0 })
		if q := queued.Load(); q <= 0 || q > int64(burstSize+burstWrites*wsMaxHeader+recordOverhead(l.kind, burstSize, burstChunk)) {
			t.Fatalf("Buffered() = %d after writing %d bytes to a client that does not read", q, burstSize)
		}
		got := c.recv(t, burstSize)
		if len(got) != burstSize {
			t.Fatalf("read %d bytes", len(got))
		}
		testenv.WaitFor(t, "Buffered() == 0", func() bool { return sc.Buffered() == 0 })
	})
}

// TestBufferedTakenAtOnce: what the socket takes when it is written is not counted as
// queued. Each of 20 writes of 1 KiB, made while nothing is queued to a client that reads,
// leaves Buffered at 0 when it returns: the broker sheds QoS 0 messages to a connection
// whose Buffered is high, so counting bytes in flight would shed them for nothing.
func TestBufferedTakenAtOnce(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		const writes, size = 20, 1 << 10
		r := newRecorder(t)
		left := make(chan []int, 1)
		r.data = func(c Conn, _ []byte) {
			var queued []int
			b := randomBytes(size)
			for range writes {
				if _, err := c.Write(b); err != nil {
					t.Error(err)
				}
				if n := c.Buffered(); n != 0 {
					queued = append(queued, n)
				}
			}
			left <- queued
		}
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		c := dial(t, l)
		c.send(t, []byte("go"))
		c.recv(t, writes*size)
		if q := recv(t, left, "the writes"); len(q) > 0 {
			t.Errorf("Buffered() after %d of %d writes the socket could take: %v, want 0", len(q), writes, q)
		}
	})
}

// TestCloseOnce checks OnClose, exactly once and with the documented error, on every path
// that closes a connection, for both transports.
func TestCloseOnce(t *testing.T) {
	type path struct {
		name  string
		opts  Options
		open  func(Conn)                    // in OnOpen
		data  func(Conn, []byte)            // in OnData
		act   func(t *testing.T, c *client) // the client's part
		check func(error) bool
		plain bool // not on TLS: a handshake may take longer than the connect timeout
	}
	isNil := func(err error) bool { return err == nil }
	isEOF := func(err error) bool { return errors.Is(err, io.EOF) }
	isIdle := func(err error) bool { return errors.Is(err, ErrIdleTimeout) }
	paths := []path{
		{name: "client closes", act: func(t *testing.T, c *client) { _ = c.Close() }, check: isEOF},
		{name: "client resets", act: func(t *testing.T, c *client) {
			_ = c.raw.SetLinger(0)
			_ = c.Close()
		}, check: func(err error) bool { return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) }},
		{name: "Close in OnData", data: func(c Conn, _ []byte) { _ = c.Close() },
			act: func(t *testing.T, c *client) { c.send(t, []byte("x")) }, check: isNil},
		{name: "Close in OnOpen", open: func(c Conn) { _ = c.Close() }, check: isNil},
		{name: "Shutdown in OnData", data: func(c Conn, _ []byte) { c.Shutdown() },
			act: func(t *testing.T, c *client) {
				c.send(t, []byte("x"))
				c.expectEnd(t)
				_ = c.Close()
			}, check: isNil},
		{name: "idle timeout", open: func(c Conn) { c.SetIdleTimeout(30 * time.Millisecond) }, check: isIdle},
		{name: "connect timeout", opts: Options{ConnectTimeout: 30 * time.Millisecond}, check: isIdle, plain: true},
		{name: "connect timeout after a handshake", opts: Options{ConnectTimeout: time.Second}, check: isIdle},
		{name: "Close from another goroutine", open: func(c Conn) { go func() { _ = c.Close() }() }, check: isNil},
		{name: "panic in OnData", data: func(Conn, []byte) { panic("boom") },
			act:   func(t *testing.T, c *client) { c.send(t, []byte("x")) },
			check: func(err error) bool { return err != nil && strings.Contains(err.Error(), "OnData panicked: boom") }},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			transports(t, func(t *testing.T, typ string) {
				if p.plain && (typ == conf.ListenerTLS || typ == conf.ListenerWSS) {
					t.Skip("plain transports only")
				}
				r := newRecorder(t)
				r.open, r.data = p.open, p.data
				s := newTestServer(t, r, p.opts)
				l := listen(t, s, typ)
				c := dial(t, l)
				if p.act != nil {
					p.act(t, c)
				}
				ev := recv(t, r.closed, "OnClose")
				if !p.check(ev.err) {
					t.Errorf("OnClose(%v)", ev.err)
				}
				testenv.WaitFor(t, "Conns() == 0", func() bool { return l.Conns() == 0 })
				_ = s.Close()
				r.checkAllClosedOnce(t)
			})
		})
	}
	t.Run("Server.Close", func(t *testing.T) {
		r := newRecorder(t)
		s := newTestServer(t, r, Options{})
		lt, lw := listen(t, s, conf.ListenerTCP), listen(t, s, conf.ListenerWS)
		var cs []*client
		for range 10 {
			cs = append(cs, dial(t, lt), dial(t, lw))
		}
		for range cs {
			recv(t, r.opened, "OnOpen")
		}
		pending := dialTCP(t, lw) // a WebSocket connection still in its handshake
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if n := len(r.closed); n != len(cs) { // all delivered before Close returned
			t.Fatalf("%d OnClose calls when Close returned, want %d", n, len(cs))
		}
		for range cs {
			if ev := <-r.closed; ev.err != nil {
				t.Errorf("OnClose(%v), want nil", ev.err)
			}
		}
		r.checkAllClosedOnce(t)
		for _, c := range append(cs, &client{Conn: pending}) {
			_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
			if _, err := io.ReadAll(c); err != nil {
				t.Errorf("client: %v, want EOF", err)
			}
		}
		if lt.Conns() != 0 || lw.Conns() != 0 {
			t.Errorf("Conns() = %d, %d after Close", lt.Conns(), lw.Conns())
		}
	})
}

// TestShutdown has the server queue far more than the socket takes, then Shutdown: the
// client reads every byte and then a clean end (no reset), and the server closes when the
// client does, well before the drain timeout.
func TestShutdown(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		want := randomBytes(4 << 20)
		var afterShutdown atomic.Value
		r.data = func(c Conn, _ []byte) {
			for b := want; len(b) > 0; b = b[min(len(b), 100000):] {
				if _, err := c.Write(b[:min(len(b), 100000)]); err != nil {
					t.Error(err)
				}
			}
			c.Shutdown()
			c.Shutdown() // idempotent
			_, err := c.Write([]byte("late"))
			afterShutdown.Store(errors.Join(err, errors.New("")))
		}
		s := newTestServer(t, r, Options{LingerTimeout: time.Minute})
		l := listen(t, s, typ)
		c := dial(t, l)
		c.send(t, []byte("bye"))
		if got := c.recv(t, len(want)); !bytes.Equal(got, want) {
			t.Fatal("the data differ")
		}
		c.expectEnd(t)
		if err := afterShutdown.Load().(error); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write after Shutdown: %v, want net.ErrClosed", err)
		}
		select {
		case ev := <-r.closed:
			t.Fatalf("OnClose(%v) before the client closed", ev.err)
		default:
		}
		c.send(t, []byte("dropped")) // received after Shutdown: not delivered
		_ = c.Close()
		if ev := recv(t, r.closed, "OnClose"); ev.err != nil {
			t.Errorf("OnClose(%v), want nil", ev.err)
		}
		_ = s.Close()
		r.checkAllClosedOnce(t)
	})
}

// TestCloseNotReading: Close on a connection whose client reads nothing, with far more
// queued than the sockets hold, delivers OnClose(nil) and closes the socket, at once or
// (the portable engine, which sends what was written before a Close) within the drain
// timeout: the client, which keeps writing, sees its connection end.
func TestCloseNotReading(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		r.data = func(c Conn, _ []byte) {
			writeBurst(t, c)
			_ = c.Close()
		}
		s := newTestServer(t, r, Options{LingerTimeout: 100 * time.Millisecond})
		l := listen(t, s, typ)
		c := dial(t, l)
		c.send(t, []byte("go"))
		if ev := recv(t, r.closed, "OnClose"); ev.err != nil {
			t.Fatalf("OnClose(%v), want nil", ev.err)
		}
		// Once the server's socket is gone, the client's writes are answered with a reset.
		deadline := time.Now().Add(testenv.Timeout)
		var err error
		for err == nil && time.Now().Before(deadline) {
			_, err = c.raw.Write([]byte{0})
			time.Sleep(5 * time.Millisecond)
		}
		if err == nil {
			t.Fatalf("the server still holds the socket %v after Close", testenv.Timeout)
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("client write: %v, want a reset", err)
		}
	})
}

// TestShutdownDrain: a client that never closes is closed after the drain timeout.
func TestShutdownDrain(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := newRecorder(t)
		r.data = func(c Conn, _ []byte) { c.Shutdown() }
		s := newTestServer(t, r, Options{LingerTimeout: 50 * time.Millisecond})
		l := listen(t, s, typ)
		c := dial(t, l)
		c.send(t, []byte("bye"))
		c.expectEnd(t)
		start := time.Now()
		if ev := recv(t, r.closed, "OnClose"); ev.err != nil {
			t.Errorf("OnClose(%v), want nil", ev.err)
		}
		t.Logf("closed %v after the client saw the end", time.Since(start))
	})
}

// TestIdleTimeoutRefresh keeps a connection alive with traffic that the handler counts as
// activity (Touch), then lets it go idle.
func TestIdleTimeoutRefresh(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		const idle = 300 * time.Millisecond
		r := newRecorder(t)
		r.open = func(c Conn) { c.SetIdleTimeout(idle) }
		r.data = func(c Conn, _ []byte) { c.Touch() }
		s := newTestServer(t, r, Options{ConnectTimeout: time.Hour})
		l := listen(t, s, typ)
		c := dial(t, l)
		sc := recv(t, r.opened, "OnOpen")
		var last time.Time
		for range 20 { // 1 s of traffic, a byte every 50 ms
			last = time.Now()
			c.send(t, []byte{1})
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case ev := <-r.closed:
			t.Fatalf("OnClose(%v) while receiving", ev.err)
		default:
		}
		testenv.WaitFor(t, "the last byte", func() bool { return len(r.received(sc)) == 20 })
		ev := recv(t, r.closed, "OnClose")
		if elapsed := time.Since(last); !errors.Is(ev.err, ErrIdleTimeout) || elapsed < idle-50*time.Millisecond {
			t.Fatalf("OnClose(%v) %v after the last byte, want ErrIdleTimeout after %v", ev.err, elapsed, idle)
		}
	})
}

// TestIdleTimeoutBytesAlone: bytes the handler does not Touch for (a packet that never
// completes, dribbled a byte at a time) do not refresh the idle timeout: the connection is
// closed once it runs out, while the bytes still come [MQTT-3.1.2-22].
func TestIdleTimeoutBytesAlone(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		const idle = 300 * time.Millisecond
		r := newRecorder(t)
		r.open = func(c Conn) { c.SetIdleTimeout(idle) }
		s := newTestServer(t, r, Options{ConnectTimeout: time.Hour})
		l := listen(t, s, typ)
		c := dial(t, l)
		sc := recv(t, r.opened, "OnOpen")
		start := time.Now()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			msg := []byte{1}
			if c.ws != nil {
				msg = frame(true, wsBinary, msg)
			}
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := c.Write(msg); err != nil {
					return // closed by the server
				}
			}
		})
		ev := recv(t, r.closed, "OnClose")
		close(stop)
		wg.Wait()
		elapsed := time.Since(start)
		if !errors.Is(ev.err, ErrIdleTimeout) {
			t.Fatalf("OnClose(%v), want ErrIdleTimeout", ev.err)
		}
		if elapsed < idle-50*time.Millisecond {
			t.Errorf("closed %v after the open, before the idle timeout of %v", elapsed, idle)
		}
		if n := len(r.received(sc)); n < 2 {
			t.Fatalf("test broken: the client sent %d bytes before the close", n)
		}
		t.Logf("closed %v after the open, bytes arriving all along", elapsed.Round(time.Millisecond))
	})
}

// TestConnectTimeoutAbsolute: a client that keeps sending, a message every 20 ms, but is
// never accepted (the handler does not call SetIdleTimeout, as the broker does once
// CONNECT is accepted) is closed when the connect timeout, counted from the accept, runs
// out: a slowloris client dribbling its CONNECT cannot hold a connection. (That bytes
// keep a connection once SetIdleTimeout was called is TestIdleTimeoutRefresh.)
func TestConnectTimeoutAbsolute(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		const connect = 500 * time.Millisecond
		r := newRecorder(t)
		s := newTestServer(t, r, Options{ConnectTimeout: connect})
		l := listen(t, s, typ)
		start := time.Now()
		c := dial(t, l)
		sc := recv(t, r.opened, "OnOpen")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			msg := []byte("x")
			if c.ws != nil {
				msg = frame(true, wsBinary, msg)
			}
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := c.Write(msg); err != nil {
					return // closed by the server
				}
			}
		})
		ev := recv(t, r.closed, "OnClose")
		close(stop)
		wg.Wait()
		elapsed := time.Since(start)
		if !errors.Is(ev.err, ErrIdleTimeout) {
			t.Fatalf("OnClose(%v), want ErrIdleTimeout", ev.err)
		}
		if elapsed < connect {
			t.Errorf("closed %v after the accept, before the connect timeout of %v", elapsed, connect)
		}
		n := len(r.received(sc))
		if n < 2 {
			t.Fatalf("test broken: the client sent %d bytes before the close", n)
		}
		t.Logf("closed %v after the accept, having received %d bytes", elapsed.Round(time.Millisecond), n)
	})
}

// TestHandshakeTimeout: a connection to a ws listener that never upgrades is closed by
// the connect timeout, without any event.
func TestHandshakeTimeout(t *testing.T) {
	r := newRecorder(t)
	s := newTestServer(t, r, Options{ConnectTimeout: 30 * time.Millisecond})
	l := listen(t, s, conf.ListenerWS)
	silent := dialTCP(t, l)
	notFound := dialTCP(t, l)
	_, res, err := wsHandshake(notFound, "/elsewhere", "mqtt")
	if err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("upgrade on /elsewhere: %v %v", res, err)
	}
	for _, c := range []net.Conn{silent, notFound} {
		_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("client: %v, want EOF", err)
		}
	}
	_ = s.Close()
	if len(r.opened) != 0 || len(r.closed) != 0 {
		t.Fatalf("events for connections never upgraded: %d opens, %d closes", len(r.opened), len(r.closed))
	}
	if n := upgradesHeld(s); n != 0 {
		t.Fatalf("%d handshakes left", n)
	}
	if n := reasonsHeld(s); n != 0 {
		t.Fatalf("%d close reasons kept for connections never upgraded", n)
	}
}

// TestWSHandshake checks the path and the MQTT subprotocol, on ws and on wss (where the
// answers, refusals included, go through TLS).
func TestWSHandshake(t *testing.T) { webTransports(t, testWSHandshake) }

func testWSHandshake(t *testing.T, typ string) {
	r := newRecorder(t)
	s := newTestServer(t, r, Options{})
	l := listen(t, s, typ)
	for _, tc := range []struct {
		path   string
		protos []string
		status int
		proto  string
	}{
		{"/mqtt", []string{"mqtt"}, http.StatusSwitchingProtocols, "mqtt"},
		{"/mqtt", []string{"mqttv3.1"}, http.StatusSwitchingProtocols, "mqttv3.1"},
		{"/mqtt", []string{"chat", "mqttv3.1", "mqtt"}, http.StatusSwitchingProtocols, "mqtt"},
		{"/mqtt", nil, http.StatusBadRequest, ""},
		{"/mqtt", []string{"chat"}, http.StatusBadRequest, ""},
		{"/", []string{"mqtt"}, http.StatusNotFound, ""},
		{"/mqtt/x", []string{"mqtt"}, http.StatusNotFound, ""},
	} {
		c := dialTCP(t, l)
		if l.kind&kindSecure != 0 {
			tc := tls.Client(c, clientTLS())
			if err := tc.Handshake(); err != nil {
				t.Fatalf("TLS handshake: %v", err)
			}
			c = tc
		}
		_, res, err := wsHandshake(c, tc.path, tc.protos...)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Header.Get("Sec-WebSocket-Protocol")
		if res.StatusCode != tc.status || got != tc.proto {
			t.Errorf("%s %v: %s, subprotocol %q; want %d %q", tc.path, tc.protos, res.Status, got, tc.status, tc.proto)
		}
		_ = c.Close()
	}
}

// TestWSCoder talks to the server with an independent client library.
func TestWSCoder(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	l := listen(t, s, conf.ListenerWS)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
	defer cancel()
	url := "ws://" + l.Addr().String() + "/mqtt"

	_, res, err := websocket.Dial(ctx, url, nil)
	if err == nil || res == nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("dial without subprotocol: %v, want 400", err)
	}
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != "mqtt" {
		t.Fatalf("subprotocol %q", c.Subprotocol())
	}
	recv(t, r.opened, "OnOpen")
	for i := range 10 {
		msg := randomBytes(1 + i*1000)
		if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		readEcho(ctx, t, c, i, msg)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
	if ev := recv(t, r.closed, "OnClose"); !errors.Is(ev.err, io.EOF) {
		t.Errorf("OnClose(%v), want io.EOF", ev.err)
	}

	// A text message breaks the MQTT binding: the server closes without delivering it.
	c, _, err = websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err != nil {
		t.Fatal(err)
	}
	sc := recv(t, r.opened, "OnOpen")
	if err := c.Write(ctx, websocket.MessageText, []byte("text")); err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, r.closed, "OnClose"); !errors.Is(ev.err, errWSText) {
		t.Errorf("OnClose(%v), want errWSText", ev.err)
	}
	if got := r.received(sc); len(got) != 0 {
		t.Errorf("text delivered: %d bytes", len(got))
	}
	_ = c.CloseNow()
}

// TestWSPing: the server answers a ping with a pong carrying the same payload.
func TestWSPing(t *testing.T) { webTransports(t, testWSPing) }

func testWSPing(t *testing.T, typ string) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	l := listen(t, s, typ)
	c := dial(t, l).ws
	if _, err := c.Write(frame(true, 0x9, []byte("are you there"))); err != nil {
		t.Fatal(err)
	}
	op, fin, p, err := c.readFrame()
	if err != nil || op != wsPong || !fin || string(p) != "are you there" {
		t.Fatalf("got opcode %d %q %v, want a pong", op, p, err)
	}
	c.send(t, []byte("still echoing"))
	if got := c.readMessage(t); string(got) != "still echoing" {
		t.Fatalf("echo %q", got)
	}
}

// TestListenerClose closes one listener: its connections close, the other's live on.
func TestListenerClose(t *testing.T) {
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{})
	a, b := listen(t, s, conf.ListenerTCP), listen(t, s, conf.ListenerWS)
	ca, cb := dial(t, a), dial(t, b)
	recv(t, r.opened, "OnOpen")
	recv(t, r.opened, "OnOpen")
	pending := dialTCP(t, b) // in its handshake
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ev := recv(t, r.closed, "OnClose"); ev.c.Listener() != b || ev.err != nil {
		t.Fatalf("OnClose(%v) for %s", ev.err, ev.c.Listener().Name())
	}
	_ = cb.SetReadDeadline(time.Now().Add(testenv.Timeout))
	if _, err := io.ReadAll(cb); err != nil {
		t.Errorf("client of the closed listener: %v", err)
	}
	// The pending connection may not have left the kernel's accept queue when the
	// listener closed (the portable engine accepts on a goroutine of its own), and the
	// kernel resets those: closed either way, which is what counts, and never left hanging.
	_ = pending.SetReadDeadline(time.Now().Add(testenv.Timeout))
	if _, err := io.ReadAll(pending); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("connection in its handshake on the closed listener: %v", err)
	}
	if _, err := net.Dial("tcp", b.Addr().String()); err == nil {
		t.Error("the closed listener still accepts")
	}
	ca.send(t, []byte("alive"))
	if got := ca.recv(t, 5); string(got) != "alive" {
		t.Fatalf("echo %q", got)
	}
	if a.Conns() != 1 || b.Conns() != 0 {
		t.Fatalf("Conns() = %d, %d", a.Conns(), b.Conns())
	}
}

// flakyListener fails Accept a number of times, then blocks until closed.
type flakyListener struct {
	net.Listener // for Addr
	fails        atomic.Int32
	calls        atomic.Int32
	closed       chan struct{}
	once         sync.Once
}

func (f *flakyListener) Accept() (net.Conn, error) {
	f.calls.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	<-f.closed
	return nil, net.ErrClosed
}

func (f *flakyListener) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// logCounter counts log records at Error.
type logCounter struct{ n atomic.Int32 }

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelError {
		h.n.Add(1)
	}
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// TestAcceptBackoff: accept errors are logged and retried, and Close ends the loop.
func TestAcceptBackoff(t *testing.T) {
	logs := &logCounter{}
	s := newTestServer(t, newRecorder(t), Options{Logger: slog.New(logs)})
	l, err := newListener(s, conf.Listener{Type: conf.ListenerTCP, Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyListener{closed: make(chan struct{})}
	f.fails.Store(4)
	l.ln = f
	start := time.Now()
	go l.acceptLoop(func() error {
		c, err := l.ln.Accept()
		if err == nil {
			t.Error("accepted a connection")
			_ = c.Close()
		}
		return err
	})
	testenv.WaitFor(t, "five accepts", func() bool { return f.calls.Load() == 5 })
	if d := time.Since(start); d < (5+10+20+40)*time.Millisecond {
		t.Errorf("four failures retried within %v: no back-off", d)
	}
	if n := logs.n.Load(); n != 4 {
		t.Errorf("%d errors logged, want 4", n)
	}
	done := make(chan struct{})
	go func() { _ = l.stop(); close(done) }()
	recv(t, done, "the accept loop to stop")
}

// TestStartStop closes Servers right after their first Listen, with various numbers of
// pollers: a Close that comes before a poller's loop has started must not be lost.
func TestStartStop(t *testing.T) {
	for _, pollers := range []int{1, 2, 3, 5, 8} {
		for i := range 10 {
			s := New(newRecorder(t), Options{Pollers: pollers, Logger: testLogger(t)})
			typ := []string{conf.ListenerTCP, conf.ListenerWS}[i%2]
			if _, err := s.Listen(conf.Listener{Type: typ, Address: "127.0.0.1:0"}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- s.Close() }()
			if err := recv(t, done, "Close"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestOpenWrite: on TCP, OnOpen runs before the socket is read. What it writes beyond
// what the new socket takes at once is queued and sent.
func TestOpenWrite(t *testing.T) {
	r := newRecorder(t)
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	r.open = func(c Conn) {
		if _, err := c.Write(big); err != nil {
			t.Errorf("Write in OnOpen: %v", err)
		}
	}
	s := newTestServer(t, r, Options{})
	l := listen(t, s, conf.ListenerTCP)
	nc := dialTCP(t, l)
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(big))
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatalf("reading what OnOpen wrote: %v", err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("the bytes OnOpen wrote arrived changed")
	}
}
