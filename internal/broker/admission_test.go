package broker

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// TestAdmissionUnderPressure: near the memory limit a new client is refused with quota
// exceeded (5.0) or server unavailable (3.1.1), and admitted again once the pressure is
// gone.
func TestAdmissionUnderPressure(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			level := memory.Soft
			b := benchBroker(t)
			b.mem.press = func() memory.Level { return level }
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
			want := packet.QuotaExceeded
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

// TestQoS0ShedUnderPressure: under memory pressure a QoS 0 message is not kept for a
// subscriber whose connection holds a sixteenth of the slow-consumer threshold (counted
// as memory_pressure);
// one whose connection takes it at once still gets it, QoS 1 is still queued, and without
// pressure the same backlog is below the slow-consumer threshold and QoS 0 is written.
func TestQoS0ShedUnderPressure(t *testing.T) {
	level := memory.None
	b := storeBroker(t, store.NewMemory(), nil)
	b.mem.press = func() memory.Level { return level }
	slow := dialT(t, b, packet.V5, "slow", nil)
	fast := dialT(t, b, packet.V5, "fast", nil)
	slow.subscribe(1, 1, "s/#")
	fast.subscribe(1, 1, "s/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	slow.lines() // the SUBACKs
	fast.lines()
	level = memory.Soft
	slow.c.buffered.Store(5000) // above 4 KiB, a sixteenth of the 64 KiB slow-consumer threshold
	pub.publish(0, 0, false, "s/0", "a")
	pub.publish(1, 1, false, "s/1", "b")
	equalLines(t, "fast", fast.lines(), []string{`PUBLISH s/0 q0 "a"`, `PUBLISH s/1 q1 "b"`})
	equalLines(t, "slow", slow.lines(), []string{`PUBLISH s/1 q1 "b"`})
	if n := b.stats.dropped[session.DropPressure].Load(); n != 1 {
		t.Fatalf("%d drops counted as memory_pressure, want 1", n)
	}

	level = memory.None
	pub.publish(0, 0, false, "s/2", "c")
	equalLines(t, "slow without pressure", slow.lines(), []string{`PUBLISH s/2 q0 "c"`})
}
