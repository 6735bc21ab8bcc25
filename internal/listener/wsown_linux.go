//go:build linux

package listener

import (
	"encoding/binary"
	"errors"
)

// WebSocket on our own loop, for ws and wss alike: the upgrade request is read and
// answered (wsupgrade.go), and from then on frames are decoded (wsframe.go), the MQTT
// bytes handed to OnData and pings and close frames answered here. On ws the poller feeds
// the bytes it reads; on wss the TLS pump feeds the plaintext (tlsown_linux.go), and what
// is written goes through TLS (conn.writeLocked). The connect timeout runs from the
// accept, as for every transport, and OnOpen comes with the upgrade.
//
// A ws connection's decoder state lives in its poller's map, and only while the last read
// ended inside a frame or the request (stWSHeld): an idle connection keeps nothing but
// its conn. Only the poller goroutine touches the map. (A wss connection keeps it in its
// tlsConn, as the goroutine that pumps may be its handshake goroutine.)

// errWSRequest closes a connection whose upgrade request was refused (it gets no events:
// it never opened).
var errWSRequest = errors.New("listener: WebSocket upgrade refused")

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

// wsFeed runs the upgrade and the decoder over data and returns the bytes left over (the
// start of something cut by the end of the read); nil once the connection is done with
// (closed, refused). Only one goroutine at a time feeds a connection; loop is the poller
// it runs on, or -1 (see conn.onData).
func wsFeed(c *conn, w *wsStream, data []byte, loop int) []byte {
	if c.state.Load()&stUpgraded == 0 {
		end := wsRequestEnd(data)
		if end < 0 {
			if len(data) >= wsMaxRequest {
				wsRefuse(c, httpError(nil, "431 Request Header Fields Too Large", "the request head is over 8 KiB"))
				return nil
			}
			return data
		}
		var buf [512]byte
		resp, ok := answerUpgrade(buf[:0], data[:end], c.l.path)
		if !ok {
			wsRefuse(c, resp)
			return nil
		}
		if err := wsSend(c, nil, resp); err != nil {
			return nil
		}
		c.state.Or(stUpgraded)
		c.open()
		data = data[end:]
	}
	for len(data) > 0 {
		kind, payload, n, err := w.next(data)
		if err != nil {
			var we *wsError
			errors.As(err, &we)
			wsCloseWith(c, we.code, err)
			return nil
		}
		if kind == wsNeedMore {
			return data
		}
		data = data[n:]
		switch kind {
		case wsPayload:
			if len(payload) > 0 {
				c.onData(payload, loop)
			}
		case wsPing:
			var hdr [wsMaxHeader]byte
			_ = wsSend(c, appendWSHeader(hdr[:0], wsPong, len(payload)), payload)
		case wsCloseFrame:
			// The peer closes: echo its status (RFC 6455 section 5.5.1) unless ours went
			// already (Shutdown), and close; OnClose gets io.EOF.
			c.state.Or(stPeerClose)
			code := uint16(1005) // no status: answer with none
			if len(payload) >= 2 {
				code = binary.BigEndian.Uint16(payload)
			}
			wsCloseWith(c, code, nil)
			return nil
		}
		if c.state.Load()&(stCloseReq|stFdClosed) != 0 {
			return nil
		}
	}
	return nil
}

// wsSend writes head and body as one unit through c's write path.
func wsSend(c *conn, head, body []byte) error {
	mu := c.writeLock()
	mu.Lock()
	defer mu.Unlock()
	bufs := [1][]byte{body}
	return c.writeLocked(head, bufs[:])
}

// wsRefuse answers a refused upgrade and closes the connection.
func wsRefuse(c *conn, resp []byte) {
	mu := c.writeLock()
	mu.Lock()
	defer mu.Unlock()
	bufs := [1][]byte{resp}
	_ = c.writeLocked(nil, bufs[:])
	c.closeHeld(errWSRequest)
}

// wsCloseWith sends a close frame with code (none for 1005) unless one was sent already
// (Shutdown), and closes the connection with err as OnClose's reason.
func wsCloseWith(c *conn, code uint16, err error) {
	mu := c.writeLock()
	mu.Lock()
	defer mu.Unlock()
	if c.state.Load()&stShutdown == 0 {
		frame := [4]byte{0x80 | wsClose, 0}
		n := 2
		if code != 1005 {
			frame[1] = 2
			binary.BigEndian.PutUint16(frame[2:], code)
			n = 4
		}
		_ = c.writeLocked(frame[:n], nil)
	}
	c.closeHeld(err)
}

// closeHeld closes the connection with err as OnClose's reason; c's write lock
// (writeLock) is held. On tls and wss that is not wmu, which closing takes.
func (c *conn) closeHeld(err error) {
	if c.l.kind&kindSecure != 0 {
		_ = c.closeWith(err)
		return
	}
	_ = c.closeOwnLocked(err)
}
