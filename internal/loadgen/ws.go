package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// wsReadLimit bounds one WebSocket message the tool reads: well above any PUBLISH it
// sends (coder/websocket's default, 32 KiB, is below the larger -size runs).
const wsReadLimit = 64 << 20

// dialWS opens the i-th connection as MQTT over WebSocket: a TCP connection dialed as
// dialTCP does (same source addresses), the HTTP upgrade asking for subprotocol mqtt
// (MQTT 5.0 section 6.0, 3.1.1 section 6), and then a net.Conn whose writes are one
// binary message each and whose reads run across messages, so that the rest of the
// tool speaks MQTT on it as on TCP. The WebSocket layer is coder/websocket, the library
// the broker's own tests use as an independent peer; it costs this process a goroutine
// or two per connection, which the broker's figures do not include.
func (d *dialer) dialWS(ctx context.Context, i int) (net.Conn, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.dialTCP(ctx, i)
		},
		DisableKeepAlives: true,
		Proxy:             nil, // loopback only, never through a proxy
	}
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	c, _, err := websocket.Dial(hctx, "ws://"+d.addr+d.wsPath, &websocket.DialOptions{
		HTTPClient:   &http.Client{Transport: tr},
		Subprotocols: []string{"mqtt"},
	})
	if err != nil {
		return nil, err
	}
	if c.Subprotocol() != "mqtt" {
		_ = c.CloseNow()
		return nil, fmt.Errorf("loadgen: the broker answered the upgrade with subprotocol %q, want mqtt", c.Subprotocol())
	}
	c.SetReadLimit(wsReadLimit)
	// The conn lives until close: not bounded by ctx, which may be a connect timeout.
	return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
}
