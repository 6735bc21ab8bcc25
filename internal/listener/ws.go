package listener

import (
	"encoding/binary"
	"errors"
)

// MQTT over WebSocket (MQTT 5.0 section 6, 3.1.1 section 6): binary messages only, the
// subprotocol "mqtt" ("mqttv3.1" for MQTT 3.1 clients), a message may hold part of a
// packet or several. On both engines and for ws and wss alike, the upgrade request is read
// and answered in place (ws_upgrade.go), and from then on frames are decoded as a stream
// (ws_frame.go), the MQTT bytes handed to OnData and pings and close frames answered here
// (wsFeed). On ws the engine's reader feeds the bytes it reads (a poller:
// epoll_ws_linux.go; the connection's goroutine: portable_read.go); on wss the TLS pump
// feeds the plaintext (deliverWeb), and what is written goes through TLS
// (conn.writeLocked). The connect timeout runs from the accept, as for every transport,
// and OnOpen comes with the upgrade.

// Subprotocols we speak, in order of preference. Spec [MQTT-6.0.0-3], [MQTT-6.0.0-4].
var wsSubprotocols = []string{"mqtt", "mqttv3.1"}

// WebSocket opcodes (RFC 6455 section 5.2) and the frames we send.
const (
	wsBinary    = 0x2
	wsClose     = 0x8
	wsPong      = 0xA
	wsMaxHeader = 10 // FIN/opcode, length 127, 64-bit length; server frames are not masked
)

// wsCloseNormal is a close frame with status 1000, normal closure.
var wsCloseNormal = [4]byte{0x80 | wsClose, 2, 0x03, 0xE8}

// appendWSHeader appends the header of one unfragmented, unmasked frame of n bytes.
func appendWSHeader(b []byte, opcode byte, n int) []byte {
	b = append(b, 0x80|opcode)
	switch {
	case n < 126:
		return append(b, byte(n))
	case n <= 0xFFFF:
		return binary.BigEndian.AppendUint16(append(b, 126), uint16(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, 127), uint64(n))
	}
}

// errWSRequest closes a connection whose upgrade request was refused (it gets no events:
// it never opened).
var errWSRequest = errors.New("listener: WebSocket upgrade refused")

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
	_ = c.closeSocketLocked(err)
}

// tlsWeb is a wss connection's WebSocket state: the decoder's, only while the last
// plaintext ended inside the upgrade request or a frame (as ws connections on the epoll
// engine keep it in their poller's map); nil between two frames. It belongs to the
// goroutine that pumps.
type tlsWeb struct {
	ws *wsStream
}

// deliverWeb runs the upgrade and the frame decoder over a wss connection's plaintext,
// and reports false once the connection is closing.
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
