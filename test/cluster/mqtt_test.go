package cluster

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// mqttConnect opens an MQTT connection to addr and sends a clean CONNECT as client id in
// protocol v, and returns the CONNACK and the connection, open (a refused one is closed
// by the broker).
func mqttConnect(addr, id string, v packet.Version) (packet.Connack, net.Conn, error) {
	return mqttConnectWith((&net.Dialer{}).DialContext, addr, id, v)
}

// mqttConnectWith is mqttConnect through dial.
func mqttConnectWith(dial func(ctx context.Context, network, addr string) (net.Conn, error), addr, id string, v packet.Version) (packet.Connack, net.Conn, error) {
	var ack packet.Connack
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	conn, err := dial(ctx, "tcp", addr)
	cancel()
	if err != nil {
		return ack, nil, err
	}
	c := packet.Connect{Version: v, CleanStart: true, ClientID: []byte(id), KeepAlive: 60}
	_ = conn.SetDeadline(time.Now().Add(testenv.Timeout))
	if _, err := conn.Write(c.AppendTo(nil, v)); err != nil {
		conn.Close()
		return ack, nil, err
	}
	var buf []byte
	chunk := make([]byte, 512)
	for {
		h, n, err := packet.ParseHeader(buf, v)
		if err != nil {
			conn.Close()
			return ack, nil, err
		}
		if n > 0 && len(buf) >= h.Size() {
			if h.Type != packet.CONNACK {
				conn.Close()
				return ack, nil, fmt.Errorf("%s answered CONNECT with packet type %d", addr, h.Type)
			}
			err := ack.Decode(h, buf[n:h.Size()], v)
			_ = conn.SetDeadline(time.Time{})
			return ack, conn, err
		}
		m, err := conn.Read(chunk)
		if err != nil {
			conn.Close()
			return ack, nil, fmt.Errorf("%s: no CONNACK: %w", addr, err)
		}
		buf = append(buf, chunk[:m]...)
	}
}
