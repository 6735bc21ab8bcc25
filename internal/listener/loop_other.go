//go:build !linux

package listener

import (
	"errors"
	"log/slog"
	"net"

	"github.com/lesismal/nbio/nbhttp"
)

// Where our own event loop does not run (it is built on epoll: loop_linux.go), tcp
// connections are served by nbio like the other transports, and a conn never has a socket
// of its own.

// loop is the event loop of loop_linux.go; it is never made here.
type loop struct{}

func (*loop) stop() {}

// acceptPlain returns the accept step of a tcp or ws listener: Go's Accept, then nbio.
// s.mu is held.
func (s *Server) acceptPlain(l *Listener) (func() error, error) {
	if s.engine == nil {
		if err := s.startEngine(); err != nil {
			return nil, err
		}
	}
	if l.kind&kindWeb != 0 {
		return l.acceptStd(s.admitWS), nil
	}
	return l.acceptStd(s.admitTCP), nil
}

// admitTCP takes over a connection accepted on a tcp listener. nbio duplicates its
// descriptor and closes the net.Conn (Go's poller lets go of it), the engine polls the
// duplicate, and OnOpen runs from the engine's open hook before the first read. The
// session of a TCP nbio conn is its *conn; that is how the hooks find it.
func (s *Server) admitTCP(l *Listener, raw net.Conn) {
	nc, err := takeOver(raw)
	if err != nil {
		_ = raw.Close()
		s.log.Warn("listener: cannot take over connection", slog.String("listener", l.name), slog.Any("err", err))
		return
	}
	c := &conn{nc: nc, l: l}
	c.admitting()
	nc.SetSession(c)
	_, err = s.engine.AddConn(nc) // OnOpen runs in here
	c.admitted()
	if err != nil {
		// nbio closed it; if OnOpen ran, OnClose follows from the close hook.
		s.log.Warn("listener: cannot poll connection", slog.String("listener", l.name), slog.Any("err", err))
	}
}

// admitWS takes over a connection accepted on a ws listener: it starts as HTTP.
func (s *Server) admitWS(l *Listener, raw net.Conn) {
	nc, err := takeOver(raw) // close-on-exec: see takeOver
	if err != nil {
		_ = raw.Close()
		s.log.Warn("listener: cannot take over connection", slog.String("listener", l.name), slog.Any("err", err))
		return
	}
	hc := &nbhttp.Conn{Conn: nc}
	hc.Parser = nbhttp.NewParser(hc, s.engine, nbhttp.NewServerProcessor(), false, nc.Execute)
	nc.SetSession(hc.Parser)
	c := &conn{nc: nc, l: l}
	c.admitting()
	s.hsMu.Lock()
	s.hs[nc] = c
	s.hsMu.Unlock()
	_, err = s.engine.AddConn(nc) // the connect timeout starts in here
	c.admitted()
	if err != nil {
		s.handshake(nc, true) // nbio may have closed it before the close hook could run
		s.log.Warn("listener: cannot poll connection", slog.String("listener", l.name), slog.Any("err", err))
	}
}

// errNoOwnSocket is what the own-socket operations below would report: they are never
// called, since ownSocket is false for every conn here.
var errNoOwnSocket = errors.New("listener: no own sockets on this platform")

func (c *conn) ownSocket() bool { return false }

func (c *conn) writeOwn([]byte, [][]byte) error { return errNoOwnSocket }

func (c *conn) closeOwnLocked(error) error { return errNoOwnSocket }

func (c *conn) ownAddr(bool) net.Addr { return &net.TCPAddr{} }
