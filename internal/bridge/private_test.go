package bridge

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestTryPrivateFallback: a 3.1.1 remote that refuses the bridge marker (CONNACK 1,
// unacceptable protocol version, to level 0x84) gets a plain level 4 CONNECT next, as
// Mosquitto's bridge does, and the bridge comes up.
func TestTryPrivateFallback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	levels := make(chan byte, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// CONNECT: type, remaining length (short here), "MQTT" (2+4 bytes), level.
				hdr := make([]byte, 9)
				if _, err := io.ReadFull(c, hdr); err != nil {
					return
				}
				level := hdr[8]
				levels <- level
				code := byte(0)
				if level&0x80 != 0 {
					code = 1
				}
				_, _ = c.Write([]byte{0x20, 2, 0, code})
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	bc := bridgeConf("old", l.Addr().String(), conf.BridgeV311, conf.BridgeTopic{Pattern: "a/#"})
	_, _, set := startBifrost(t, bc)
	want := []byte{0x84, 0x04}
	for _, w := range want {
		select {
		case got := <-levels:
			if got != w {
				t.Fatalf("CONNECT level %#x, want %#x", got, w)
			}
		case <-time.After(testenv.Timeout):
			t.Fatalf("no CONNECT with level %#x", w)
		}
	}
	testenv.WaitFor(t, "the bridge up", func() bool { return set.Bridges()[0].Stats().Up })
}
