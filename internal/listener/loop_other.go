//go:build !linux

package listener

import (
	"log/slog"
	"net"
	"net/netip"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/nbhttp"
)

// Where our own event loop does not run (it is built on epoll: loop_linux.go), every
// transport is served by nbio (engine_other.go), and a conn never has a socket of its own.

// acceptStep returns the accept step of l: Go's Accept, then nbio, made here by the first
// listener. s.mu is held.
func (s *Server) acceptStep(l *Listener) (func() error, error) {
	if s.engine == nil {
		if err := s.startEngine(); err != nil {
			return nil, err
		}
	}
	switch {
	case l.kind&kindSecure != 0:
		return l.acceptStd(s.admitTLS), nil
	case l.kind&kindWeb != 0:
		return l.acceptStd(s.admitWS), nil
	}
	return l.acceptStd(s.admitTCP), nil
}

// remoteIP returns c's peer IP address, IPv4 unmapped.
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// acceptStd returns the accept step of a listener served by nbio: Go's Accept, the Admit
// check, then admit, which hands the connection to the engine.
func (l *Listener) acceptStd(admit func(*Listener, net.Conn)) func() error {
	return func() error {
		c, err := l.ln.Accept()
		if err != nil {
			return err
		}
		if a := l.srv.o.Admit; a != nil && !a(l, remoteIP(c)) {
			_ = c.Close()
			return nil
		}
		admit(l, c)
		return nil
	}
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
	c := &conn{connEngine: connEngine{nc: nc}, l: l}
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
	c := &conn{connEngine: connEngine{nc: nc}, l: l}
	c.admitting()
	s.hsMu.Lock()
	if s.hs == nil {
		s.hs = make(map[*nbio.Conn]*conn)
	}
	s.hs[nc] = c
	s.hsMu.Unlock()
	_, err = s.engine.AddConn(nc) // the connect timeout starts in here
	c.admitted()
	if err != nil {
		s.handshake(nc, true) // nbio may have closed it before the close hook could run
		s.log.Warn("listener: cannot poll connection", slog.String("listener", l.name), slog.Any("err", err))
	}
}
