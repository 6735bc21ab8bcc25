package packet

import (
	"errors"
	"testing"
)

// TestConnectBridgeMarker: a 3.1 or 3.1.1 CONNECT whose protocol level has the 0x80 bit
// (Mosquitto's try_private) decodes as that version with Bridge set, and encodes back to
// the same bytes; 5.0 has no marker, so 0x85 stays an unsupported level.
func TestConnectBridgeMarker(t *testing.T) {
	for _, v := range []Version{V31, V311} {
		c := Connect{Version: v, Bridge: true, CleanStart: true, ClientID: []byte("b")}
		raw := c.AppendTo(nil, v)
		h, n, err := ParseHeader(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		level := raw[n+2+len(protocolName(v))]
		if level != byte(v)|0x80 {
			t.Errorf("%s: level %#x written, want %#x", v, level, byte(v)|0x80)
		}
		var d Connect
		if err := d.Decode(h, raw[n:], 0); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if d.Version != v || !d.Bridge {
			t.Errorf("%s: decoded version %s bridge %v", v, d.Version, d.Bridge)
		}
	}
	raw := []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 0x85, 0x02, 0, 0, 0, 0, 0}
	h, n, _ := ParseHeader(raw, 0)
	var d Connect
	var rc ReasonCode
	if err := d.Decode(h, raw[n:], 0); !errors.As(err, &rc) || rc != UnsupportedProtocolVersion {
		t.Errorf("level 0x85: %v, want unsupported protocol version", err)
	}
}
