package broker

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestAdmissionUnderPressure: near the memory limit a new client is refused with server
// busy (5.0) or server unavailable (3.1.1), and admitted again once the pressure is gone.
func TestAdmissionUnderPressure(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			level := memory.Soft
			b := benchBroker(t)
			b.press = func() memory.Level { return level }
			c := &benchConn{}
			b.OnOpen(c)
			b.OnData(c, (&packet.Connect{Version: v, CleanStart: true, ClientID: []byte("c")}).AppendTo(nil, v))
			cl := c.Value().(*client)
			if cl.s != nil || !cl.closing {
				t.Fatal("a client was admitted under memory pressure")
			}
			h, n, err := packet.ParseHeader(c.last, v)
			if err != nil || n == 0 || h.Type != packet.CONNACK {
				t.Fatalf("answer % x is no CONNACK", c.last)
			}
			var ack packet.Connack
			if err := ack.Decode(h, c.last[n:h.Size()], v); err != nil {
				t.Fatal(err)
			}
			want := packet.ServerBusy
			if v != packet.V5 {
				want = packet.ServerUnavailable // 3.1.1 return code 3
			}
			if ack.Code != want {
				t.Fatalf("CONNACK code %v, want %v", ack.Code, want)
			}
			level = memory.None
			connect(t, b, "d", v)
		})
	}
}
