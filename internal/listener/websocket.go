package listener

import "encoding/binary"

// MQTT over WebSocket (MQTT 5.0 section 6, 3.1.1 section 6): binary messages only, the
// subprotocol "mqtt" ("mqttv3.1" for MQTT 3.1 clients), a message may hold part of a packet
// or several. This file holds what every WebSocket path shares. On Linux, ws and wss run
// on our own loop: the upgrade is parsed in place (wsupgrade.go), frames are decoded as a
// stream (wsframe.go), by the poller for ws and by the TLS pump for wss (wsown_linux.go,
// tlsown_linux.go). Elsewhere they run on nbio (websocket_other.go).

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
