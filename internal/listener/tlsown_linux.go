//go:build linux

package listener

// TLS on our own loop (tls.go says how crypto/tls is driven): the poller hands the
// ciphertext it reads to the connection's tlsConn with its own pump buffers, the wire
// writes through conn.writeOwn, and wss runs the upgrade and frame decoder of ws
// (wsown_linux.go) on the plaintext. Nothing of nbio is involved: an idle TLS connection
// costs its tlsConn and the tls.Conn, and no engine's record.

// tlsWeb is a wss connection's WebSocket state: the decoder's, only while the last
// plaintext ended inside the upgrade request or a frame (as ws connections keep it in
// their poller's map); nil between two frames. It belongs to the goroutine that pumps.
type tlsWeb struct {
	ws *wsStream
}

// tlsData hands bytes read from a tls or wss connection to its TLS pump, with the
// poller's pump buffers (made by its first TLS bytes: a server without TLS listeners
// never has them). Only this poller's goroutine uses them.
func (p *poller) tlsData(c *conn, data []byte) {
	if p.tls == nil {
		p.tls = newPumpBufs(len(p.buf))
		p.tls.loop = p.idx
	}
	c.tls().received(data, p.tls)
}

// beginWeb: a wss connection's decoder state is made when a read ends inside a frame.
func (t *tlsConn) beginWeb() {}

// deliverWeb runs the upgrade and the frame decoder over plaintext, and reports false
// once the connection is closing.
func (t *tlsConn) deliverWeb(p []byte, loop int) bool {
	var local wsStream
	w := t.ws
	if w == nil {
		w = &local
	}
	w.keep(wsFeed(&t.conn, w, w.start(p), loop))
	switch {
	case w.idle():
		t.ws = nil
	case w == &local:
		kept := local // local.held, if any, was made by keep
		t.ws = &kept
	}
	return t.state.Load()&(stCloseReq|stFdClosed) == 0
}

// endWeb lets a closed wss connection's decoder state go.
func (t *tlsConn) endWeb() { t.ws = nil }

// Write sends what crypto/tls wrote (a record, or the handshake's flight), under the
// tls.Conn's write lock, taking c.wmu as every write to the socket does. b is crypto/tls's
// pooled buffer: writeOwn copies what the socket does not take.
func (w *tlsWire) Write(b []byte) (int, error) {
	c := &w.conn
	bufs := [1][]byte{b}
	c.wmu.Lock()
	err := c.writeOwn(nil, bufs[:])
	c.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	return len(b), nil
}
