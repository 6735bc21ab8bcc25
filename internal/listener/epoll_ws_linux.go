//go:build linux && !bifrost_portable

package listener

// WebSocket connections on the epoll engine: the poller feeds the bytes it reads to the
// upgrade and the frame decoder (ws.go wsFeed).
//
// A ws connection's decoder state lives in its poller's map, and only while the last read
// ended inside a frame or the request (stWSHeld): an idle connection keeps nothing but
// its conn. Only the poller goroutine touches the map. (A wss connection keeps it in its
// tlsConn, as the goroutine that pumps may be its handshake goroutine: ws.go.)

// wsData handles bytes read from a ws connection.
func (p *poller) wsData(c *conn, data []byte) {
	var local wsStream
	w := &local
	if c.state.Load()&stWSHeld != 0 {
		w = p.ws[c]
	}
	w.keep(wsFeed(c, w, w.start(data), p.idx))
	switch {
	case w.idle() && w == &local:
	case w.idle():
		delete(p.ws, c)
		c.state.And(^uint32(stWSHeld))
	case w == &local:
		kept := local // local.held, if any, was made by keep
		p.ws[c] = &kept
		c.state.Or(stWSHeld)
	}
}
