//go:build !linux

package listener

import (
	"crypto/tls"
	"encoding/binary"
	"net/http"
	"strings"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// WebSocket on nbio (ws and wss where our own loop does not run). The upgrade and the
// frames are handled by nbhttp and nbhttp/websocket on the engine's pollers (the executor
// is synchronous: no goroutine per connection or message).
//
// Life of a connection: accepted, it gets an nbhttp parser as its nbio session and a conn
// record in Server.hs, under the connect timeout. When a GET on the listener's path with
// the subprotocol upgrades, the nbio session becomes the *websocket.Conn, whose own session
// is our conn, and OnOpen runs. Requests on other paths get 404, upgrades without an MQTT
// subprotocol 400; such a connection stays an HTTP connection until it closes or its
// connect timeout ends it.
//
// Writes do not go through websocket.Conn: our write path frames them (a 2-10 byte header
// written with the payload in one writev) so that they are vectored and ordered with the
// pongs and close frames, which go through it too.
//
// wss is the same on the plaintext of a TLS connection (tls.go): its parser is made when
// the handshake starts, with the tls.Conn as the connection nbhttp writes its responses
// to, and fed by the TLS pump instead of by the engine; its conn record is the tlsConn's,
// so it needs no entry in Server.hs.

// newUpgrader returns the upgrader shared by every ws listener of s.
func (s *Server) newUpgrader(e *nbhttp.Engine) *websocket.Upgrader {
	u := websocket.NewUpgrader()
	u.Engine = e
	u.Subprotocols = wsSubprotocols
	u.KeepaliveTime = 0 // no read deadline (a timer per connection): the wheel does it
	u.MessageLengthLimit = s.o.MaxWSMessage
	u.ReleasePayload = true
	// Browsers' MQTT clients are served from any origin; authentication is MQTT's job.
	u.CheckOrigin = func(*http.Request) bool { return true }
	u.OnMessage(s.onWSMessage)
	u.SetPingHandler(s.onWSPing)
	u.SetPongHandler(func(*websocket.Conn, string) {})
	u.SetCloseHandler(s.onWSClose)
	return u
}

// serveHTTP answers every HTTP request on a ws or wss listener, where the connection is
// pumped: in the poller, or for wss in its handshake goroutine.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var nc *nbio.Conn
	var c *conn
	if res, ok := w.(*nbhttp.Response); ok && res.Parser != nil {
		if hc, ok := res.Parser.Conn.(*nbhttp.Conn); ok {
			switch x := hc.Conn.(type) {
			case *nbio.Conn:
				nc = x
				c = s.handshake(nc, false)
			case *tls.Conn:
				if w, ok := x.NetConn().(*tlsWire); ok {
					c = &w.conn
				}
			}
		}
	}
	switch {
	case c == nil:
		http.Error(w, "listener: unknown connection", http.StatusInternalServerError)
		return
	case r.URL.Path != c.l.path:
		http.NotFound(w, r)
		return
	case !offersMQTT(r.Header):
		http.Error(w, "listener: the WebSocket subprotocol mqtt is required", http.StatusBadRequest)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	ws.SetSession(c)
	if nc != nil {
		s.handshake(nc, true)
	}
	c.open()
}

// offersMQTT reports whether the client offers one of our subprotocols.
func offersMQTT(h http.Header) bool {
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			for _, want := range wsSubprotocols {
				if p == want {
					return true
				}
			}
		}
	}
	return false
}

// onWSMessage delivers a data message's payload. Spec [MQTT-6.0.0-1]: anything but a
// binary message closes the connection.
func (s *Server) onWSMessage(ws *websocket.Conn, mt websocket.MessageType, data []byte) {
	c, _ := ws.Session().(*conn)
	if c == nil {
		return
	}
	if mt != websocket.BinaryMessage {
		_ = c.closeWith(errWSText)
		return
	}
	c.onData(data, -1)
}

// onWSPing answers a ping through our write path, so it cannot split one of our frames.
func (s *Server) onWSPing(ws *websocket.Conn, data string) {
	c, _ := ws.Session().(*conn)
	if c == nil {
		return
	}
	var hdr [wsMaxHeader]byte
	bufs := [1][]byte{[]byte(data)}
	mu := c.writeLock()
	mu.Lock()
	_ = c.writeLocked(appendWSHeader(hdr[:0], wsPong, len(data)), bufs[:])
	mu.Unlock()
}

// onWSClose handles the peer's close frame: unless we sent ours (Shutdown), echo its
// status as RFC 6455 section 5.5.1 asks. nbhttp closes the connection when this returns.
func (s *Server) onWSClose(ws *websocket.Conn, code int, _ string) {
	c, _ := ws.Session().(*conn)
	if c == nil {
		return
	}
	c.state.Or(stPeerClose)
	mu := c.writeLock()
	mu.Lock()
	defer mu.Unlock()
	if c.state.Load()&stShutdown != 0 {
		return
	}
	frame := [4]byte{0x80 | wsClose, 0}
	n := 2
	if code != 1005 { // 1005: the peer gave no status; answer with none
		frame[1] = 2
		binary.BigEndian.PutUint16(frame[2:], uint16(code))
		n = 4
	}
	_ = c.writeLocked(frame[:n], nil)
}
