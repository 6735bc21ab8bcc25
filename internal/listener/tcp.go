package listener

import (
	"log/slog"
	"net"

	"github.com/lesismal/nbio"
)

// admitTCP takes over a connection accepted on a tcp listener. nbio duplicates its
// descriptor and closes the net.Conn (Go's poller lets go of it), the engine polls the
// duplicate, and OnOpen runs from the engine's open hook before the first read. The
// session of a TCP nbio conn is its *conn; that is how the hooks find it.
func (s *Server) admitTCP(l *Listener, raw net.Conn) {
	nc, err := nbio.NBConn(raw)
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
