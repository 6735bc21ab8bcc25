// Package listener is bifrost's network layer: event-driven listeners on many ports, one
// connection contract (Conn, Handler) for every transport, and on Linux no goroutine or
// buffer for a connection that has nothing to do.
//
// # Engines
//
// Two engines serve the same contract, chosen when the broker is built:
//
//   - The epoll engine, on Linux (epoll_*_linux.go): Options.Pollers epoll loops, a
//     table of connections by descriptor, and nothing per idle connection but our
//     record: the conn (88 bytes, the 96-byte size class) on tcp and ws, the tlsConn
//     around it and crypto/tls's tls.Conn on tls and wss. The socket comes from
//     accept4(2), and its addresses are asked of the kernel when someone wants them.
//     Bytes are read on the poller goroutines into one read buffer per poller
//     (Options.ReadBufferSize), and Handler.OnData runs right there, in the poller
//     goroutine. An idle connection therefore costs our record: no goroutine, no read
//     buffer, no write buffer (writes go straight to the socket and only what the socket
//     does not take is queued until it drains).
//   - The portable engine, everywhere else, and on Linux when built with
//     -tags bifrost_portable (portable_*.go): the standard library's net package only.
//     Each connection has a goroutine that reads it, into a buffer that follows its
//     traffic, and runs OnData there; while it has bytes queued, a goroutine writes them.
//     An idle connection costs our record, Go's net.TCPConn, and a goroutine with its
//     1 KiB read buffer.
//
// On both, each listener has one accept goroutine, which hands accepted sockets on; the
// WebSocket upgrade is parsed in place (ws_upgrade.go) and frames are decoded as a stream
// (ws_frame.go, ws.go), on ws from the bytes read and on wss from the TLS plaintext.
// "The reader" below is the goroutine that reads a connection's socket: a poller, or the
// connection's own goroutine on the portable engine.
//
// # Timeouts
//
// Idle timeouts, connect timeouts and the Shutdown linger all live in one timing wheel per
// Server (wheel.go), advanced by one goroutine every Options.Tick. The connect timeout is
// absolute: it counts from the accept, through the TLS handshake and the WebSocket
// upgrade, until the handler first calls SetIdleTimeout (when CONNECT is accepted), so a
// client that dribbles a CONNECT a byte at a time is closed all the same. From then on
// the handler's Conn.Touch refreshes the deadline with one atomic store, and a timeout d
// fires between d and d+2 ticks after the last Touch. Received bytes refresh nothing by
// themselves: MQTT's keep alive counts Control Packets [MQTT-3.1.2-22], and only the
// handler knows when one is complete, so a packet dribbled a byte at a time, which never
// completes, does not keep a connection either.
//
// # Events
//
// Handler calls for one connection never overlap and come in order: OnOpen, OnData...,
// OnClose exactly once. OnOpen runs on the accept goroutine before the socket is read
// (TCP), in the reader that completed the upgrade (WebSocket; on wss, the goroutine that
// read it), or in the goroutine that completed the handshake (TLS); OnData runs in the
// reader, except on TLS for what arrived with the end of the handshake, which that
// goroutine delivers before it hands over to the reader; OnClose runs where the engine
// reports the close, or right after an OnData that was running then (a small state
// machine in conn.go hands it over without a lock). The error given to OnClose
// is nil when this side closed the connection (Close, Shutdown, Listener.Close,
// Server.Close), ErrIdleTimeout when a timeout fired, io.EOF when the peer closed it
// (for WebSocket: sent a close frame), and the I/O or protocol error otherwise.
//
// A panic in a handler call is logged and closes that connection (as net/http does for a
// request), whichever transport it came through.
//
// # Transports
//
// What differs for a transport is how an accepted socket is taken over, the framing of
// writes, and what Shutdown sends first. TLS is Go's crypto/tls, driven from the reader
// on the bytes it reads (tls.go explains how, without a goroutine or buffer per idle
// connection); wss is the WebSocket layer on the plaintext of that. Certificates are
// reloaded from their files without a restart (tls_certs.go).
//
// # Files
//
// Named by engine and transport: epoll_* the epoll engine, portable_* the portable one,
// tls_* and ws_* the transports (on both engines), the rest the contract both serve.
//
// The contract, on both engines:
//
//	listener.go                 Conn, Handler, Drainer, Batcher; Listener, its accept loop
//	server.go                   Options, the Server: Listen, Close, its goroutines
//	conn.go                     the connection record, its event state machine, its writes
//	wheel.go                    the timing wheel
//	drain.go                    the drain notices (Conn.NotifyDrained)
//	pause.go                    reads paused and resumed (Pauser)
//
// The epoll engine (linux && !bifrost_portable; linux by the files' names):
//
//	epoll_loop_linux.go         the pollers, their rounds and reads; accept, add, close
//	epoll_conn_linux.go         what a conn does with its socket: writes, queue, close
//	epoll_writev_linux.go       the writev(2) call
//	epoll_ws_linux.go           the ws decoder state a poller keeps
//	epoll_tls_linux.go          the TLS pump buffers a poller keeps
//
// The portable engine (!linux || bifrost_portable):
//
//	portable_engine.go          the accept path, and the readers Close waits for
//	portable_read.go            a connection's reader
//	portable_conn.go            its writes, its write goroutine, its close
//	portable_writenow_unix.go   writes without waiting (unix)
//	portable_writenow_other.go  every write through the write goroutine (!unix)
//
// TLS, for tls and wss:
//
//	tls.go                      crypto/tls driven by the reader: handshake, pump, writes
//	tls_gate.go                 the bound on TLS handshakes in progress
//	tls_certs.go                certificates and their reload
//	tls_input.go                crypto/tls's input buffers, lent while reading
//	tls_input_lend.go           the lending (go1.26 && !go1.27 && !bifrost_nolend)
//	tls_input_nolend.go         no lending (!go1.26 || go1.27 || bifrost_nolend)
//
// WebSocket, for ws and wss:
//
//	ws.go                       the upgrade and the frames over the bytes read (wsFeed)
//	ws_upgrade.go               the opening handshake, parsed in place
//	ws_frame.go                 the frame decoder
//
// A test file is named for its subject, and one named epoll_ or portable_ runs on that
// engine only: epoll_loop_linux_test.go and portable_engine_test.go say what the tests
// expect of each engine where they differ. drain_linux_test.go, fork_linux_test.go and
// memory_linux_test.go run on either engine, on Linux.
package listener

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// Conn is one client connection, whatever its transport. Safe for concurrent use.
type Conn interface {
	// Write queues b to be sent and returns at once; the caller may reuse b afterwards.
	// On WebSocket each call is one binary message.
	Write(b []byte) (int, error)
	// Writev queues several buffers as one write (vectored on TCP; one message on WebSocket).
	Writev(bufs [][]byte) (int, error)
	// WriteAfter is Write for a caller that orders its writes with a lock of its own,
	// held on entry: it takes the connection's write lock, then unlocks held, then
	// writes. Writes made in held's order reach the socket in that order, and held is
	// free during the system call.
	WriteAfter(b []byte, held sync.Locker) (int, error)
	// Close closes the connection at once; what the socket has not taken is dropped (the
	// portable engine's write goroutine, if one runs, still sends what was written before
	// the Close, for at most Options.LingerTimeout).
	Close() error
	// Shutdown closes gracefully: what is queued is sent, the write side is half-closed,
	// and the connection is closed when the peer closes or after Options.LingerTimeout, so a
	// client reads a final DISCONNECT instead of a reset. For WebSocket a close frame is
	// sent first; on TLS a close_notify alert last. Later writes fail with net.ErrClosed
	// and received bytes are dropped.
	Shutdown()
	// SetIdleTimeout closes the connection (OnClose gets ErrIdleTimeout) when Touch is not
	// called for d, counted from now; 0 disables. Every connection starts under the
	// connect timeout, which nothing extends; the first SetIdleTimeout ends it.
	// Resolution: see the package doc.
	SetIdleTimeout(d time.Duration)
	// Touch records activity: the idle timeout starts over. The handler calls it when it
	// has received what counts as activity (the broker: a complete Control Packet), not
	// for every read. It does nothing under the connect timeout or after Shutdown. It
	// reads the clock and makes at most one atomic store: no lock, no allocation.
	Touch()
	// Buffered is the number of bytes queued and not yet written to the socket (on TLS,
	// encrypted bytes: a little more than what was written).
	Buffered() int
	// NotifyDrained asks for one Drainer.OnDrained call once at most Options.DrainedAt
	// bytes are queued for the connection (Buffered; by default, once nothing is): at
	// once, from another goroutine, if that is so now. Requests made before that call
	// comes are one request. It takes no lock and
	// allocates nothing (a bit of the connection's state); it does nothing if the
	// Handler is no Drainer, or after Shutdown or Close.
	NotifyDrained()
	RemoteAddr() net.Addr
	LocalAddr() net.Addr
	Listener() *Listener
	// Value returns what SetValue stored. SetValue is meant for OnOpen (or the other
	// callbacks of this connection); Value may then be read from any goroutine.
	Value() any
	SetValue(v any)
	// TLS returns the state of the connection's TLS session (protocol version, cipher
	// suite and, on a listener with client_ca_file, the verified client certificate:
	// PeerCertificates[0]), or nil on tcp and ws listeners. The handshake is complete
	// before OnOpen. Each call returns a new copy.
	TLS() *tls.ConnectionState
}

// Handler receives connection events. Calls for one connection never overlap and come in
// order: OnOpen, OnData..., OnClose (exactly once). Calls for different connections may
// run at the same time.
type Handler interface {
	// OnOpen is called for a new connection before any data. It may write.
	OnOpen(c Conn)
	// OnData delivers bytes received; data is valid only during the call.
	OnData(c Conn, data []byte)
	// OnClose reports the end of the connection; err says why (see the package doc).
	OnClose(c Conn, err error)
}

// A Drainer is a Handler that wants to know when the bytes queued for a connection have
// gone out, down to Options.DrainedAt (Conn.NotifyDrained): a broker that holds messages
// back from a slow consumer, rather than queue them all in its connection, writes more
// when it has drained.
type Drainer interface {
	// OnDrained is called once per Conn.NotifyDrained, when at most Options.DrainedAt
	// bytes are queued for c (by default: none). It runs on a goroutine of the Server's
	// (one for all connections, running only while calls are due; drain.go), so it may
	// run at the same time as c's other calls, or even just after its OnClose: it is a
	// hint that c may take more, nothing else.
	OnDrained(c Conn)
}

// A Batcher is a Handler that puts work off to the end of a poller's round. Between two
// waits for events a poller delivers the data of every ready connection, one call at a
// time on its own goroutine, then calls EndRound: a broker that writes what those calls
// produced once per round, rather than once per call, sends a subscriber the packets of
// many publishers in one write, and commits their durable messages together.
type Batcher interface {
	// OnRoundData is OnData delivered by poller loop (0 <= loop < Server.Pollers()):
	// calls with the same loop never overlap, and EndRound(loop) follows them before the
	// poller waits again. Data delivered off the pollers (by a TLS handshake goroutine,
	// or by an engine without pollers) comes through OnData.
	OnRoundData(c Conn, data []byte, loop int)
	// EndRound is called by poller loop after each round of events.
	EndRound(loop int)
}

var (
	// ErrIdleTimeout is given to OnClose when a connection received nothing for its idle
	// (or connect) timeout.
	ErrIdleTimeout = errors.New("listener: idle timeout")
	// ErrServerClosed is returned by Listen after Close.
	ErrServerClosed = errors.New("listener: server closed")
	// ErrWriteFenced is given to OnClose, and returned by writes, when Options.WriteFence
	// refused a write to an admitted connection.
	ErrWriteFenced = errors.New("listener: writes fenced (Options.WriteFence)")
)

// Listener kinds, by the transport they serve: bits, so that wss is ws over tls.
const (
	kindTCP    uint8 = 0
	kindWeb    uint8 = 1 << 0 // WebSocket framing
	kindSecure uint8 = 1 << 1 // TLS
	kindWS           = kindWeb
	kindTLS          = kindSecure
	kindWSS          = kindWeb | kindSecure
)

// Listener is one endpoint of a Server.
type Listener struct {
	srv   *Server
	name  string
	typ   string // conf.ListenerTCP, ...
	kind  uint8
	path  string // WebSocket path
	ln    net.Listener
	dup   io.Closer    // epoll engine: the duplicate of ln's socket that accepts
	certs *certSource  // tls, wss: the certificate, reloaded when its files change
	n     atomic.Int64 // open connections (OnOpen delivered, OnClose not yet)

	closeOnce sync.Once
	closed    atomic.Bool
	quit      chan struct{} // closed by stop: ends an accept back-off early
	stopped   chan struct{} // closed when the accept loop has returned
}

// Name returns the listener's configured name.
func (l *Listener) Name() string { return l.name }

// Type returns the listener's type: tcp, tls, ws, wss.
func (l *Listener) Type() string { return l.typ }

// Addr returns the address the listener is bound to, with the port chosen when the
// configured port was 0.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Conns returns the number of open connections: opened (OnOpen) and not yet closed
// (OnClose). TLS connections count from the end of the handshake, WebSocket connections
// from the upgrade.
func (l *Listener) Conns() int { return int(l.n.Load()) }

// Close stops accepting and closes the listener's connections (OnClose for each follows,
// asynchronously); those already shutting down (Conn.Shutdown) finish their drain first.
// Idempotent.
func (l *Listener) Close() error {
	err := l.stop()
	l.srv.closeConns(l)
	return err
}

// SetTLS puts the certificate files of tls in force for the handshakes from now on (a
// reload that changed the paths or min_version); open connections keep theirs. On error
// the listener keeps its certificate. A listener without TLS refuses.
func (l *Listener) SetTLS(tls conf.TLS) error {
	if l.certs == nil {
		return errors.New("listener: " + l.name + ": not a TLS listener")
	}
	return l.certs.use(tls)
}

// stop closes the socket and waits for the accept loop to return.
func (l *Listener) stop() error {
	var err error
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.quit)
		err = l.ln.Close()
		if l.dup != nil {
			_ = l.dup.Close() // ends the accept loop's wait
		}
		<-l.stopped
		l.srv.forget(l)
	})
	return err
}

// Accept back-off, as net/http's Serve: 5ms doubling to 1s while accepting fails.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop runs step, which accepts connections and hands them on, until the listener
// is closed. Any other accept error (EMFILE, ENFILE, ENOBUFS...) is logged and step is
// retried after a back-off, so a listener never stops while it is open.
func (l *Listener) acceptLoop(step func() error) {
	defer close(l.stopped)
	var delay time.Duration
	for {
		err := step()
		if err == nil {
			delay = 0
			continue
		}
		if l.closed.Load() || errors.Is(err, net.ErrClosed) {
			return
		}
		if delay == 0 {
			delay = acceptBackoffMin
		} else {
			delay = min(2*delay, acceptBackoffMax)
		}
		l.srv.log.Error("listener: accept failed; retrying",
			slog.String("listener", l.name), slog.Any("err", err), slog.Duration("retry_in", delay))
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-l.quit:
			t.Stop()
			return
		}
	}
}

// newListener checks cfg and fills its defaults, and loads a TLS listener's certificate;
// it does not open a socket.
func newListener(s *Server, cfg conf.Listener) (*Listener, error) {
	l := &Listener{srv: s, name: cfg.Name, typ: cfg.Type, path: cfg.Path,
		quit: make(chan struct{}), stopped: make(chan struct{})}
	if l.name == "" {
		l.name = cfg.Type + "@" + cfg.Address
	}
	switch cfg.Type {
	case conf.ListenerTCP:
		l.kind = kindTCP
	case conf.ListenerWS:
		l.kind = kindWS
	case conf.ListenerTLS:
		l.kind = kindTLS
	case conf.ListenerWSS:
		l.kind = kindWSS
	default:
		return nil, errors.New("listener: " + l.name + ": unknown type " + cfg.Type)
	}
	if l.kind&kindWeb != 0 {
		if l.path == "" {
			l.path = conf.DefaultWSPath
		}
		if l.path[0] != '/' {
			return nil, errors.New("listener: " + l.name + ": path must start with /: " + l.path)
		}
	}
	if l.kind&kindSecure != 0 {
		if cfg.TLS == nil {
			return nil, errors.New("listener: " + l.name + ": a " + cfg.Type + " listener needs a tls block")
		}
		certs, err := newCertSource(l.name, *cfg.TLS, s.log)
		if err != nil {
			return nil, err
		}
		l.certs = certs
	}
	return l, nil
}
