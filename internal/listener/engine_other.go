//go:build !linux

package listener

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// The nbio engine, which serves every transport where our own loop does not run (it is
// built on epoll: loop_linux.go): one nbio engine inside an nbhttp engine, made by the
// first Listen, with Options.Pollers epoll loops, so that the WebSocket upgrade and
// frames are parsed on the same loops. nbio's own listeners are not used (see the package
// doc); our accept loops hand it the sockets (loop_other.go), and its hooks below find our
// conn through the nbio conn's session.

// eventLoops is the part of Server that serves connections: here nbio's engine and what it
// needs (on Linux our loop: loop_linux.go).
type eventLoops struct {
	engine   *nbhttp.Engine // made by the first Listen
	upgrader *websocket.Upgrader

	hsMu   sync.Mutex
	hs     map[*nbio.Conn]*conn // WebSocket connections not yet upgraded (made by the first)
	hsPeak int                  // most entries hs held since it was made

	// TLS, set up by the first tls or wss Listen (s.mu held, before its accept loop runs).
	scratch     []*pumpBufs   // per poller: the buffers of the connection it pumps
	scratchBusy []atomic.Bool // per poller: its scratch is in use (see scratchFor)
}

// initEngine points nbio's process-wide log at slog, once (the first New).
func initEngine() { nbioOnce.Do(setUpNbio) }

// startEngineTLS makes the pollers' TLS buffers. s.mu is held.
func (s *Server) startEngineTLS() {
	s.scratch = make([]*pumpBufs, s.o.Pollers)
	s.scratchBusy = make([]atomic.Bool, s.o.Pollers)
	for i := range s.scratch {
		s.scratch[i] = newPumpBufs(s.o.ReadBufferSize)
	}
}

// stopLoops stops the engine, if one was made. Listen makes none any more (s.closed).
func (s *Server) stopLoops() {
	s.mu.Lock()
	e := s.engine
	s.mu.Unlock()
	if e != nil {
		// Stop closes every connection and waits for their close hooks, then stops the
		// pollers, which deliver any OnClose handed to them before they exit.
		e.Stop()
	}
}

// startEngine creates and starts the nbio engine. s.mu is held.
func (s *Server) startEngine() error {
	e := nbhttp.NewEngine(nbhttp.Config{
		Name:                    "bifrost",
		NPoller:                 s.o.Pollers,
		ReadBufferSize:          s.o.ReadBufferSize,
		ReadLimit:               s.o.MaxWSMessage + 64, // a frame's header and a partial next one
		Handler:                 http.HandlerFunc(s.serveHTTP),
		ServerExecutor:          func(f func()) { f() }, // run parsed requests and messages in the poller
		SupportServerOnly:       true,
		ReleaseWebsocketPayload: true,
		// nbio reads a socket at most this many times per readiness event, and closes it
		// when the same event also reports the peer's hang-up: bytes beyond the reads are
		// lost. nbio's default, 3 (96 KiB here), loses the end of a large PUBLISH and the
		// DISCONNECT of a client that sends them and closes at once (mosquitto_pub -s).
		// 256 reads (8 MiB) cover any socket receive buffer the kernel grants by default,
		// while one client flooding a poller still yields it after 8 MiB.
		MaxConnReadTimesPerEventLoop: 256,
	})
	e.Engine.OnOpen(s.onOpen)
	e.Engine.OnData(s.onData)
	e.Engine.OnWrittenSize(s.onWritten)
	e.OnClose(s.onClose)
	s.engine, s.upgrader = e, s.newUpgrader(e) // before Start: the pollers read them
	if err := e.Start(); err != nil {
		s.engine, s.upgrader = nil, nil
		return fmt.Errorf("listener: starting the event loops: %w", err)
	}
	if err := s.awaitPollers(); err != nil {
		// Not stopped: Stop hangs on a poller that has not started (see awaitPollers).
		s.engine, s.upgrader = nil, nil
		return err
	}
	return nil
}

// connOf returns our record of an open (or opening) connection, or nil.
func connOf(nc *nbio.Conn) *conn {
	switch x := nc.Session().(type) {
	case *conn:
		return x
	case *tlsConn:
		return &x.conn
	case *websocket.Conn:
		c, _ := x.Session().(*conn)
		return c
	}
	return nil
}

// onOpen is nbio's open hook, called in the accept goroutine once the poller is chosen and
// before the socket is polled: nothing can be read before it returns.
func (s *Server) onOpen(nc *nbio.Conn) {
	switch x := nc.Session().(type) {
	case *conn: // TCP
		x.open()
	case *nbhttp.Parser: // WebSocket before the upgrade: only the connect timeout
		if c := s.handshake(nc, false); c != nil {
			s.wheel.set(c, s.o.ConnectTimeout)
		}
	case *tlsConn: // before the handshake: only the connect timeout
		s.wheel.set(&x.conn, s.o.ConnectTimeout)
	}
}

// onData is nbio's data hook, called in the poller with bytes read into its buffer.
func (s *Server) onData(nc *nbio.Conn, data []byte) {
	switch x := nc.Session().(type) {
	case *conn:
		x.onData(data, -1)
	case *tlsConn:
		buf, done := s.scratchFor(nc)
		x.received(data, buf)
		done()
	case pollerProbe:
		x.ready <- x.i
	case *websocket.Conn:
		s.engine.DataHandler(nc, data)
	default: // HTTP: a WebSocket connection before its upgrade
		// Taking hsMu orders this poller after admitWS for the race detector, which does
		// not see the hand-off through epoll; reads of this kind are few.
		s.handshake(nc, false)
		s.engine.DataHandler(nc, data)
	}
}

// onWritten is nbio's hook for bytes that reached the socket, called with nc locked.
func (s *Server) onWritten(nc *nbio.Conn, _ []byte, n int) {
	if c := connOf(nc); c != nil {
		c.written(n)
	}
}

// onClose is nbhttp's close hook, called once per connection after nbio closed it.
func (s *Server) onClose(netc net.Conn, _ error) {
	nc, ok := netc.(*nbio.Conn)
	if !ok {
		return
	}
	if t, ok := nc.Session().(*tlsConn); ok {
		t.ended()
		return
	}
	c := connOf(nc)
	if c == nil {
		c = s.handshake(nc, true)
	}
	if c != nil {
		c.closed()
	}
}

// handshake returns the record of a WebSocket connection not yet upgraded, and forgets it
// if take.
func (s *Server) handshake(nc *nbio.Conn, take bool) *conn {
	s.hsMu.Lock()
	c := s.hs[nc]
	if take && c != nil {
		delete(s.hs, nc)
		s.hsPeak = max(s.hsPeak, len(s.hs)+1)
		if len(s.hs) == 0 && s.hsPeak > 256 {
			// A map never shrinks: let a storm's buckets go once it has passed.
			s.hs, s.hsPeak = make(map[*nbio.Conn]*conn), 0
		}
	}
	s.hsMu.Unlock()
	return c
}

// nbioLog sends nbio's log, which is global to the process, to slog.Default: its Info and
// Debug lines (engine start and stop) at Debug, the others at their level. Installed once,
// by the first New.
type nbioLog struct{}

var nbioOnce sync.Once

// setUpNbio points nbio's process-wide log at slog (nbioLog), once.
func setUpNbio() { logging.SetLogger(nbioLog{}) }

func (nbioLog) Debug(format string, v ...any) { nbioLogAt(slog.LevelDebug, format, v) }
func (nbioLog) Info(format string, v ...any)  { nbioLogAt(slog.LevelDebug, format, v) }
func (nbioLog) Warn(format string, v ...any)  { nbioLogAt(slog.LevelWarn, format, v) }
func (nbioLog) Error(format string, v ...any) { nbioLogAt(slog.LevelError, format, v) }

func nbioLogAt(level slog.Level, format string, v []any) {
	l := slog.Default()
	if l.Enabled(context.Background(), level) {
		l.Log(context.Background(), level, fmt.Sprintf(format, v...), slog.String("component", "nbio"))
	}
}
