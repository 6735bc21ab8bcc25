package listener

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// recv receives from ch, failing the test after testenv.Timeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testenv.Timeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// A closeEvent is one OnClose.
type closeEvent struct {
	c   Conn
	err error
}

// connLog is what a recorder saw of one connection.
type connLog struct {
	data   bytes.Buffer
	busy   atomic.Bool
	closes int
	err    error
}

// recorder is a Handler that records every event, checks the ordering contract as events
// come (no overlap, nothing after OnClose, OnClose once) and reports opens and closes on
// channels. Hooks, when set, run inside the corresponding callback.
type recorder struct {
	t      testing.TB
	echo   bool
	open   func(Conn)
	data   func(Conn, []byte)
	opened chan Conn
	closed chan closeEvent

	mu    sync.Mutex
	conns map[Conn]*connLog
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, opened: make(chan Conn, 1<<14), closed: make(chan closeEvent, 1<<14),
		conns: make(map[Conn]*connLog)}
}

func (r *recorder) log(c Conn) *connLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[c]
}

func (r *recorder) enter(c Conn, what string) *connLog {
	lg := r.log(c)
	if lg == nil {
		r.t.Errorf("%s on a connection never opened", what)
		return &connLog{}
	}
	if !lg.busy.CompareAndSwap(false, true) {
		r.t.Errorf("%s overlaps another call for the same connection", what)
	}
	r.mu.Lock()
	closes := lg.closes
	r.mu.Unlock()
	if closes > 0 {
		r.t.Errorf("%s after OnClose", what)
	}
	return lg
}

func (r *recorder) OnOpen(c Conn) {
	r.mu.Lock()
	if r.conns[c] != nil {
		r.t.Errorf("OnOpen twice")
	}
	lg := &connLog{}
	lg.busy.Store(true)
	r.conns[c] = lg
	r.mu.Unlock()
	if r.open != nil {
		r.open(c)
	}
	lg.busy.Store(false)
	r.opened <- c
}

func (r *recorder) OnData(c Conn, data []byte) {
	lg := r.enter(c, "OnData")
	defer lg.busy.Store(false)
	r.mu.Lock()
	lg.data.Write(data)
	r.mu.Unlock()
	if r.echo {
		if _, err := c.Write(data); err != nil {
			r.t.Errorf("echo: %v", err)
		}
	}
	if r.data != nil {
		r.data(c, data)
	}
}

func (r *recorder) OnClose(c Conn, err error) {
	lg := r.enter(c, "OnClose")
	r.mu.Lock()
	lg.closes++
	lg.err = err
	r.mu.Unlock()
	lg.busy.Store(false)
	r.closed <- closeEvent{c, err}
}

// received returns a copy of what c delivered so far.
func (r *recorder) received(c Conn) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.conns[c].data.Bytes())
}

// checkAllClosedOnce checks that every connection opened got exactly one OnClose.
func (r *recorder) checkAllClosedOnce(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for c, lg := range r.conns {
		if lg.closes != 1 {
			t.Errorf("connection from %v: %d OnClose calls, want 1", c.RemoteAddr(), lg.closes)
		}
	}
}

// counter is a Handler that only counts: for the tests that measure memory.
type counter struct{ opened, closed atomic.Int64 }

func (h *counter) OnOpen(Conn)             { h.opened.Add(1) }
func (h *counter) OnData(Conn, []byte)     {}
func (h *counter) OnClose(Conn, error)     { h.closed.Add(1) }
func (h *counter) open() int               { return int(h.opened.Load() - h.closed.Load()) }
func (h *counter) String() string          { return fmt.Sprint(h.opened.Load(), h.closed.Load()) }
func testLogger(t testing.TB) *slog.Logger { return slog.New(slog.NewTextHandler(tWriter{t}, nil)) }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newTestServer returns a Server with a fine tick, closed when the test ends.
func newTestServer(t testing.TB, h Handler, o Options) *Server {
	t.Helper()
	if o.Tick == 0 {
		o.Tick = 10 * time.Millisecond
	}
	if o.Pollers == 0 {
		o.Pollers = 2
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	s := New(h, o)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// listen opens a listener of type typ on a random loopback port; tls and wss listeners
// serve the test PKI's server certificate (tls_pki_test.go).
func listen(t testing.TB, s *Server, typ string) *Listener {
	t.Helper()
	cfg := conf.Listener{Type: typ, Address: "127.0.0.1:0"}
	if typ == conf.ListenerTLS || typ == conf.ListenerWSS {
		cfg.TLS = tlsFiles(t, false)
	}
	l, err := s.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sourceAddr spreads client sockets over 127.0.0.2..127.0.0.201 so that many connections
// do not exhaust one address's ephemeral ports.
func sourceAddr(i int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%200))}
}

// dialTCP connects a plain client.
func dialTCP(t testing.TB, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// wsClient is a minimal WebSocket client on a raw connection, to control every byte
// (split frames, pings) and to hold thousands of connections without a goroutine each.
type wsClient struct {
	net.Conn
	r *bufio.Reader
}

// handshake sends an upgrade request for path offering protos and returns the response.
func wsHandshake(c net.Conn, path string, protos ...string) (*wsClient, *http.Response, error) {
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n", path)
	if len(protos) > 0 {
		fmt.Fprintf(&req, "Sec-WebSocket-Protocol: %s\r\n", strings.Join(protos, ", "))
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(c, req.String()); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	return &wsClient{Conn: c, r: br}, res, nil
}

// frame encodes one masked client frame.
func frame(fin bool, opcode byte, payload []byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xFFFF:
		b = binary.BigEndian.AppendUint16(append(b, 0x80|126), uint16(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 0x80|127), uint64(n))
	}
	var key [4]byte
	_, _ = rand.Read(key[:])
	b = append(b, key[:]...)
	for i, x := range payload {
		b = append(b, x^key[i%4])
	}
	return b
}

// send writes one binary message in one frame.
func (w *wsClient) send(t testing.TB, payload []byte) {
	t.Helper()
	if _, err := w.Write(frame(true, wsBinary, payload)); err != nil {
		t.Fatal(err)
	}
}

// readFrame reads one (unmasked, server) frame.
func (w *wsClient) readFrame() (opcode byte, fin bool, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(w.r, h[:]); err != nil {
		return
	}
	if h[1]&0x80 != 0 {
		return 0, false, nil, errors.New("server frame is masked")
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var x [2]byte
		if _, err = io.ReadFull(w.r, x[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		if _, err = io.ReadFull(w.r, x[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(x[:])
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(w.r, payload)
	return h[0] & 0x0F, h[0]&0x80 != 0, payload, err
}

// readMessage reads one binary message, failing on anything else.
func (w *wsClient) readMessage(t testing.TB) []byte {
	t.Helper()
	op, fin, p, err := w.readFrame()
	if err != nil {
		t.Fatal(err)
	}
	if op != wsBinary || !fin {
		t.Fatalf("frame opcode %d fin %v, want one binary frame", op, fin)
	}
	return p
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// reasonsHeld returns the close reasons the Server keeps (Server.reasons): none once every
// connection has closed, opened or not.
func reasonsHeld(s *Server) int {
	n := 0
	s.reasons.Range(func(any, any) bool { n++; return true })
	return n
}

// readEcho reads the echo of msg (the i-th) from a WebSocket client. The server hands on
// bytes, not messages (MQTT is a stream): the echo may come in several messages.
func readEcho(ctx context.Context, t *testing.T, c *websocket.Conn, i int, msg []byte) {
	t.Helper()
	var got []byte
	for len(got) < len(msg) {
		typ, part, err := c.Read(ctx)
		if err != nil || typ != websocket.MessageBinary {
			t.Fatalf("echo %d: %v %v", i, typ, err)
		}
		got = append(got, part...)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %d: %d bytes differ", i, len(msg))
	}
}

// What writeBurst writes: 8 MiB, more than loopback's socket buffers take, in writes of
// 64 KiB.
const (
	burstChunk  = 64 << 10
	burstWrites = 128
	burstSize   = burstChunk * burstWrites
)

// writeBurst writes burstSize bytes to c at once and returns how many stayed queued
// (Buffered).
func writeBurst(t testing.TB, c Conn) int {
	b := randomBytes(burstChunk)
	for range burstWrites {
		if _, err := c.Write(b); err != nil {
			t.Error(err)
		}
	}
	return c.Buffered()
}

// connGoroutines returns how many goroutines serve one connection each, counted by their
// profile labels (Server.spawn): the portable engine's readers and write goroutines; the
// epoll engine has none. The count is the process's.
func connGoroutines(t testing.TB) int32 {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	var n, count int
	for line := range strings.Lines(b.String()) {
		if k, _, ok := strings.Cut(line, " @ "); ok {
			count, _ = strconv.Atoi(k)
			continue
		}
		if strings.HasPrefix(line, "# labels: ") && (strings.Contains(line, `"bifrost":"connection"`) ||
			strings.Contains(line, `"bifrost":"connection write"`)) {
			n += count
		}
	}
	return int32(n)
}

// sharedGoroutines returns s's goroutines but those that serve one connection each
// (connGoroutines): accept loops, the wheel, pollers, handshakes and the like.
func sharedGoroutines(t testing.TB, s *Server) int32 {
	t.Helper()
	return s.running.Load() - connGoroutines(t)
}
