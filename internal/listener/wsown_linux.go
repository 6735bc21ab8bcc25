//go:build linux

package listener

import (
	"encoding/binary"
	"errors"
)

// ws connections on our own loop: the poller reads the upgrade request, answers it
// (wsupgrade.go), and from then on decodes frames (wsframe.go), handing the MQTT bytes to
// OnData and answering pings and close frames itself. The connect timeout runs from the
// accept, as for every transport, and OnOpen comes with the upgrade.
//
// A connection's decoder state lives in its poller's map, and only while the last read
// ended inside a frame or the request (stWSHeld): an idle connection keeps nothing but
// its conn. Only the poller goroutine touches the map.

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
	w.keep(p.wsConsume(c, w, w.start(data)))
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

// wsConsume runs the upgrade and the decoder over data and returns the bytes left over
// (the start of something cut by the end of the read); nil once the connection is done
// with (closed, refused).
func (p *poller) wsConsume(c *conn, w *wsStream, data []byte) []byte {
	if c.state.Load()&stUpgraded == 0 {
		end := wsRequestEnd(data)
		if end < 0 {
			if len(data) >= wsMaxRequest {
				p.wsRefuse(c, httpError(nil, "431 Request Header Fields Too Large", "the request head is over 8 KiB"))
				return nil
			}
			return data
		}
		var buf [512]byte
		resp, ok := answerUpgrade(buf[:0], data[:end], c.l.path)
		if !ok {
			p.wsRefuse(c, resp)
			return nil
		}
		c.wmu.Lock()
		err := c.writeOwn(nil, [][]byte{resp})
		c.wmu.Unlock()
		if err != nil {
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
			p.wsClose(c, we.code, err)
			return nil
		}
		if kind == wsNeedMore {
			return data
		}
		data = data[n:]
		switch kind {
		case wsPayload:
			if len(payload) > 0 {
				c.onData(payload)
			}
		case wsPing:
			var hdr [wsMaxHeader]byte
			c.wmu.Lock()
			_ = c.writeOwn(appendWSHeader(hdr[:0], wsPong, len(payload)), [][]byte{payload})
			c.wmu.Unlock()
		case wsCloseFrame:
			// The peer closes: echo its status (RFC 6455 section 5.5.1) unless ours went
			// already (Shutdown), and close; OnClose gets io.EOF.
			c.state.Or(stPeerClose)
			code := uint16(1005) // no status: answer with none
			if len(payload) >= 2 {
				code = binary.BigEndian.Uint16(payload)
			}
			p.wsClose(c, code, nil)
			return nil
		}
		if c.state.Load()&(stCloseReq|stFdClosed) != 0 {
			return nil
		}
	}
	return nil
}

// wsRefuse answers a refused upgrade and closes the connection.
func (p *poller) wsRefuse(c *conn, resp []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.writeOwn(nil, [][]byte{resp})
	_ = c.closeOwnLocked(errWSRequest)
}

// wsClose sends a close frame with code (none for 1005) unless one was sent already
// (Shutdown), and closes the connection with err as OnClose's reason.
func (p *poller) wsClose(c *conn, code uint16, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.state.Load()&stShutdown == 0 {
		frame := [4]byte{0x80 | wsClose, 0}
		n := 2
		if code != 1005 {
			frame[1] = 2
			binary.BigEndian.PutUint16(frame[2:], code)
			n = 4
		}
		_ = c.writeOwn(frame[:n], nil)
	}
	_ = c.closeOwnLocked(err)
}
