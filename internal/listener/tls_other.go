//go:build !linux

package listener

import (
	"log/slog"
	"net"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/nbhttp"
)

// TLS on nbio, where our own loop does not run: the engine reads the ciphertext, its data
// hook hands it to tlsConn.received with the poller's scratch buffers (engine_other.go),
// the wire writes through conn.writeRaw, and wss runs nbhttp's parser on the plaintext
// (websocket_other.go).

// tlsWeb is a wss connection's WebSocket state: the HTTP parser, which hands the bytes to
// the WebSocket parser after the upgrade.
type tlsWeb struct {
	parser *nbhttp.Parser
}

// syncExecute runs the parser's work where it is called: in the goroutine that pumps.
func syncExecute(f func()) bool { f(); return true }

// admitTLS takes over a connection accepted on a tls or wss listener. The connect timeout
// starts in the engine's open hook; nothing else happens until the client speaks.
func (s *Server) admitTLS(l *Listener, raw net.Conn) {
	nc, err := takeOver(raw) // close-on-exec: see takeOver
	if err != nil {
		_ = raw.Close()
		s.log.Warn("listener: cannot take over connection", slog.String("listener", l.name), slog.Any("err", err))
		return
	}
	t := &tlsConn{conn: conn{connEngine: connEngine{nc: nc}, l: l}}
	t.admitting()
	// Taking mu orders the poller, which takes it first thing, after this goroutine for
	// the race detector, which does not see the hand-off through epoll.
	t.mu.Lock()
	t.phase = tlsHello
	t.mu.Unlock()
	nc.SetSession(t)
	_, err = s.engine.AddConn(nc) // the connect timeout starts in here
	t.admitted()
	if err != nil {
		s.log.Warn("listener: cannot poll connection", slog.String("listener", l.name), slog.Any("err", err))
	}
}

// beginWeb makes the parser of a wss connection, with the tls.Conn as the connection
// nbhttp writes its responses to. t.mu is held.
func (t *tlsConn) beginWeb() {
	hc := &nbhttp.Conn{Conn: t.tc}
	t.parser = nbhttp.NewParser(hc, t.l.srv.engine, nbhttp.NewServerProcessor(), false, syncExecute)
	hc.Parser = t.parser
}

// deliverWeb hands plaintext to the HTTP/WebSocket parser, and reports false if it
// failed (the connection is then closing).
func (t *tlsConn) deliverWeb(p []byte, _ int) bool {
	if err := t.parser.Parse(p); err != nil {
		_ = t.closeWith(err)
		return false
	}
	return true
}

// endWeb lets the parsers of a closed wss connection go of their buffers.
func (t *tlsConn) endWeb() {
	if t.parser != nil {
		_, err := t.nc.IsClosed()
		t.parser.CloseAndClean(err)
	}
}

// Write sends what crypto/tls wrote (a record, or the handshake's flight), under the
// tls.Conn's write lock. b is crypto/tls's pooled buffer: writeRaw does not keep it.
func (w *tlsWire) Write(b []byte) (int, error) {
	bufs := [1][]byte{b}
	if err := w.conn.writeRaw(nil, bufs[:]); err != nil {
		return 0, err
	}
	return len(b), nil
}

// scratchFor returns the TLS buffers of the poller that serves nc, and a function to give
// them back. nbio (v1.6.12, Engine.AddConn) gives a connection to poller fd mod pollers,
// so only that poller uses them; the busy flag makes sure of it, falling back to pooled
// buffers if that ever changed.
func (s *Server) scratchFor(nc *nbio.Conn) (*pumpBufs, func()) {
	i := nc.Hash() % len(s.scratch)
	if s.scratchBusy[i].CompareAndSwap(false, true) {
		return s.scratch[i], func() { s.scratchBusy[i].Store(false) }
	}
	b := s.tlsBufs.Get().(*pumpBufs)
	return b, func() { s.tlsBufs.Put(b) }
}
