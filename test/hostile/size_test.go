package hostile

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// publishOfSize is a QoS 1 PUBLISH (packet id 1) on topic of exactly size bytes in all.
func publishOfSize(v packet.Version, topic string, size int) []byte {
	head := 2 + len(topic) + 2 // topic, packet id
	if v == packet.V5 {
		head++ // an empty property section
	}
	rem := size - 2
	for n := rem; n >= 128; n >>= 7 {
		rem-- // each further byte of remaining length
	}
	return fixed(0x32, publishBody(v, []byte(topic), 1, nil, string(bytes.Repeat([]byte{'p'}, rem-head))))
}

// TestOversized: the broker announces mqtt.max_packet_size as its Maximum Packet Size
// (5.0 CONNACK), takes a packet of exactly that size, and answers one byte more with
// DISCONNECT 0x95 (packet too large, spec 3.2.2.3.6 and 4.13) or, before 5.0, the close;
// the fixed header alone is enough to decide, the broker does not wait for the body.
func TestOversized(t *testing.T) {
	e := start(t, nil)
	h := e.healthy(t)
	t.Run("cases", func(t *testing.T) {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			t.Run(v.String()+"/at-limit", func(t *testing.T) {
				t.Parallel()
				r := e.dial(t, v)
				ack := r.connect(v.String()+"-at-limit", nil)
				if v == packet.V5 && ack.Props.MaximumPacketSize.Get(0) != maxPacket {
					t.Fatalf("CONNACK Maximum Packet Size %v, want %d", ack.Props.MaximumPacketSize, maxPacket)
				}
				b := publishOfSize(v, "size/at-limit", maxPacket)
				if len(b) != maxPacket {
					t.Fatalf("built %d bytes, want %d", len(b), maxPacket)
				}
				r.sendBytes(b)
				r.ackFor(packet.PUBACK, 1)
			})
			t.Run(v.String()+"/one-byte-over", func(t *testing.T) {
				t.Parallel()
				r := e.dial(t, v)
				r.connect(v.String()+"-over", nil)
				r.sendBytes(publishOfSize(v, "size/over", maxPacket+1))
				r.ended(packet.PacketTooLarge)
			})
			t.Run(v.String()+"/header-only", func(t *testing.T) {
				t.Parallel()
				r := e.dial(t, v)
				r.connect(v.String()+"-header", nil)
				r.sendBytes(fixed(0x30, make([]byte, maxPacket))[:4]) // the header, no body
				r.ended(packet.PacketTooLarge)
			})
		}
		t.Run("connect-over-limit", func(t *testing.T) {
			t.Parallel()
			r := e.dial(t, packet.V5)
			b := connectBytes(packet.V5, "big", func(c *packet.Connect) { c.PasswordFlag, c.Password = true, make([]byte, maxPacket) })
			r.sendBytes(b[:8]) // the fixed header and a start
			r.closed()         // no version known yet: nothing may be said
		})
	})
	h.check(t)
}

// TestHugePromise: a fixed header that promises a 256 MB packet must not make the broker
// allocate 256 MB. With mqtt.max_packet_size set it is refused at once (DISCONNECT 0x95 in
// 5.0) before and after CONNECT; with the limit raised to the protocol's 256 MB the broker
// may buffer what actually arrives, but nothing ahead of it.
func TestHugePromise(t *testing.T) {
	huge := []byte{0xff, 0xff, 0xff, 0x7f} // 268,435,455
	t.Run("limited", func(t *testing.T) {
		e := start(t, nil)
		h := e.healthy(t)
		heap0 := liveHeap()
		for i, v := range []packet.Version{packet.V311, packet.V5} {
			r := e.dial(t, v)
			r.sendBytes(append([]byte{0x10}, huge...))
			r.closed()

			r = e.dial(t, v)
			r.connect(fmt.Sprintf("huge-%d", i), nil)
			r.sendBytes(append([]byte{0x30}, huge...))
			r.ended(packet.PacketTooLarge)
		}
		grew := int64(liveHeap()) - int64(heap0)
		t.Logf("heap after four refused 256 MB promises: %+d bytes", grew)
		if grew > 4<<20 {
			t.Errorf("heap grew by %s for packets that were refused", mib(grew))
		}
		h.check(t)
	})
	t.Run("unlimited", func(t *testing.T) {
		e := start(t, func(c *conf.Config) { c.MQTT.MaxPacketSize = packet.MaxPacketSize }) // the protocol maximum
		h := e.healthy(t)
		sent := 32 << 20
		if testenv.CI() {
			sent = 8 << 20
		}
		for _, stage := range []string{"before-connect", "after-connect"} {
			t.Run(stage, func(t *testing.T) {
				heap0 := liveHeap()
				total := 0 // bytes sent, to wait until the broker has read them
				base := e.metric(t, "bifrost_bytes_received_total")
				r := e.dial(t, packet.V5)
				first := byte(0x10)
				if stage == "after-connect" {
					r.connect("huge-"+stage, nil)
					first = 0x30
					total += len(connectBytes(packet.V5, "huge-"+stage, nil))
				}
				start := cat([]byte{first}, huge, str("t"))
				r.sendBytes(start)
				total += len(start)
				// The body dribbles in, 64 KiB a time; the broker holds what arrived.
				chunk := make([]byte, 64<<10)
				step := func(n int) int64 {
					for range n / len(chunk) {
						r.sendBytes(chunk)
						total += len(chunk)
					}
					e.received(t, base, total)
					return int64(liveHeap()) - int64(heap0)
				}
				small := step(1 << 20)
				big := step(sent - 1<<20)
				t.Logf("heap %+d bytes after 1 MiB of a 256 MB packet, %s after %s", small, mib(big), mib(int64(sent)))
				if small > 8<<20 {
					t.Errorf("heap grew by %s after 1 MiB arrived: the broker allocates ahead of the bytes", mib(small))
				}
				// The buffer doubles as bytes arrive (2x what was sent), and a measurement
				// may catch a doubling mid-copy, the old buffer still held (3x).
				if big > 3*int64(sent)+8<<20 {
					t.Errorf("heap grew by %s for %s received", mib(big), mib(int64(sent)))
				}
				_ = r.conn.Close()
				testenv.WaitFor(t, "the attacker's buffer released", func() bool {
					return int64(liveHeap())-int64(heap0) < 4<<20
				})
			})
		}
		h.check(t)
	})
}

// received waits until the broker has read n bytes more than base from its clients
// (bifrost_bytes_received_total): what was sent is in its hands, not in a socket buffer.
// Other clients only add to the count, so this may return early by their few bytes.
func (e *env) received(t testing.TB, base float64, n int) {
	t.Helper()
	testenv.WaitFor(t, "the broker to read what was sent", func() bool {
		return e.metric(t, "bifrost_bytes_received_total") >= base+float64(n)
	})
}
