package broker

import (
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestKeepAliveCountsPackets: the keep alive is refreshed by complete Control Packets, not
// by bytes [MQTT-3.1.2-22]: a read that completes no packet does not Touch the
// connection, one that completes any does, once however many it completes.
func TestKeepAliveCountsPackets(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			b := benchBroker(t)
			c := &authTestConn{}
			b.OnOpen(c)
			conn := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte("ka"), KeepAlive: 10}
			b.OnData(c, conn.AppendTo(nil, v))
			c.waitPackets(t, v, 1) // CONNACK
			touches := func() int {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.touch
			}
			c.mu.Lock()
			idle := c.idle
			c.mu.Unlock()
			if idle != 15*time.Second {
				t.Fatalf("idle timeout %v, want 1.5 x the keep alive of 10s", idle)
			}
			base := touches()

			pub := (&packet.Publish{Topic: []byte("t"), Payload: make([]byte, 64)}).AppendTo(nil, v)
			for i := range len(pub) - 1 { // a packet dribbled a byte at a time
				b.OnData(c, pub[i:i+1])
			}
			if n := touches() - base; n != 0 {
				t.Fatalf("%d touches for %d bytes of a packet not yet complete, want 0", n, len(pub)-1)
			}
			b.OnData(c, pub[len(pub)-1:])
			if n := touches() - base; n != 1 {
				t.Fatalf("%d touches once the packet completed, want 1", n)
			}
			ping := packet.Pingreq{}.AppendTo(nil, v)
			b.OnData(c, append(append(append([]byte(nil), ping...), ping...), ping[0])) // two and a half
			if n := touches() - base; n != 2 {
				t.Fatalf("%d touches after a read completing two packets, want 2 (one per read)", n)
			}
		})
	}
}
