package session

import (
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestResumeDropsReported: a client that comes back with a Maximum Packet Size smaller
// than what waits for it has those messages dropped as too_large [MQTT-3.1.2-25], and
// Attach reports each, the window's resent ones and the queue's pumped ones alike; one
// waiting for room in a smaller window is reported by the Ack that sends it.
func TestResumeDropsReported(t *testing.T) {
	big := strings.Repeat("x", 100)
	s, c := online(t, nil, ConnectInfo{ClientRecvMax: 3})
	for _, p := range []string{"small", big, big, big} { // three in flight, one queued
		deliver(t, s, Delivery{Msg: msg("t", p), QoS: 1}, at(0), Delivered)
	}
	s.Flush()
	c.take()

	c, dropped := reconnectDrops(t, s, c, ConnectInfo{ClientRecvMax: 1, ClientMaxPacket: 50}, at(0))
	equalLines(t, "resumed", c.lines(t, packet.V5), []string{`PUBLISH "t" q1 id1 dup "small"`})
	if dropped != (Drops{}) {
		t.Errorf("Attach dropped %q, want nothing yet: the window of 1 is full", dropped)
	}
	if dropped := ack(s, packet.PUBACK, 1, packet.Success); dropped != (Drops{DropTooLarge: 3}) {
		t.Errorf("Ack dropped %q, want too_large=3: two waiting, one queued", dropped)
	}
	if in, q := s.Pending(); in+q != 0 {
		t.Errorf("Pending() = %d, %d after the drops", in, q)
	}

	// Back without a maximum: one in flight, two queued.
	c = reconnect(t, s, c, ConnectInfo{ClientRecvMax: 1}, at(0))
	for _, p := range []string{big, big, big} {
		deliver(t, s, Delivery{Msg: msg("t", p), QoS: 1}, at(0), Delivered)
	}
	s.Flush()
	c.take()
	c, dropped = reconnectDrops(t, s, c, ConnectInfo{ClientRecvMax: 1, ClientMaxPacket: 50}, at(0))
	if dropped != (Drops{DropTooLarge: 3}) {
		t.Errorf("Attach dropped %q, want too_large=3: one resent, two pumped", dropped)
	}
	if got := c.lines(t, packet.V5); len(got) != 0 {
		t.Errorf("sent %q, want nothing", got)
	}
}

// TestDropReleases: whatever drops a pooled message's entry (its reason and its path: the
// pump, the resend on a reconnect, a resend that waited for room, the expiry sweep, the
// queue bounds at a restore, the read ACL) lets go of the entry's reference, once: the
// message is recycled when its publisher is done (built with invariants, a second
// release panics).
func TestDropReleases(t *testing.T) {
	big := strings.Repeat("x", 100)
	small := func(c ConnectInfo) ConnectInfo { c.ClientMaxPacket = 50; return c }
	for _, tc := range []struct {
		name string
		// run drops the entry of m, and only that one, and returns what was reported.
		run func(t *testing.T, lim *Limits, m *Message) Drops
	}{
		{"pump/too_large", func(t *testing.T, lim *Limits, m *Message) Drops {
			s, _ := online(t, lim, small(ConnectInfo{ClientRecvMax: 1}))
			deliver(t, s, Delivery{Msg: msg("t", "a"), QoS: 1}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered) // queued
			return ack(s, packet.PUBACK, 1, packet.Success)
		}},
		{"pump/expired", func(t *testing.T, lim *Limits, m *Message) Drops {
			s, _ := online(t, lim, ConnectInfo{ClientRecvMax: 1})
			deliver(t, s, Delivery{Msg: msg("t", "a"), QoS: 1}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered)
			_, dropped := s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(time.Minute))
			return dropped
		}},
		{"resume/too_large", func(t *testing.T, lim *Limits, m *Message) Drops {
			s, c := online(t, lim, ConnectInfo{})
			deliver(t, s, Delivery{Msg: m, QoS: 2}, at(0), Delivered) // in flight
			_, dropped := reconnectDrops(t, s, c, small(ConnectInfo{}), at(0))
			return dropped
		}},
		{"resend/too_large", func(t *testing.T, lim *Limits, m *Message) Drops {
			s, c := online(t, lim, ConnectInfo{})
			deliver(t, s, Delivery{Msg: msg("t", "a"), QoS: 1}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered)
			reconnect(t, s, c, small(ConnectInfo{ClientRecvMax: 1}), at(0)) // m waits for room
			return ack(s, packet.PUBACK, 1, packet.Success)
		}},
		{"sweep/expired", func(t *testing.T, lim *Limits, m *Message) Drops {
			lim.Sweeper = NewSweeper(nil)
			s, c := online(t, lim, ConnectInfo{})
			s.Detach(c)
			deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered) // queued offline
			var ds Drops
			ds[DropExpired] = uint32(lim.Sweeper.Sweep(at(time.Minute)))
			return ds
		}},
		{"trim/queue_full", func(t *testing.T, lim *Limits, m *Message) Drops {
			s, c := online(t, lim, ConnectInfo{})
			s.Detach(c)
			deliver(t, s, Delivery{Msg: msg("t", "a"), QoS: 1}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered) // the newest
			lim.QueueMessages = 1                                     // lowered since, as a restart may find it
			var ds Drops
			ds[DropQueueFull] = uint32(s.TrimQueue())
			return ds
		}},
		{"pump/acl_denied", func(t *testing.T, lim *Limits, m *Message) Drops {
			deny := false
			lim.MayRead = func(_ string, _ uint8, _ string, topic []byte) bool { return !deny || string(topic) != "t/m" }
			s, _ := online(t, lim, ConnectInfo{ClientRecvMax: 1})
			deliver(t, s, Delivery{Msg: msg("t", "a"), QoS: 1}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered)
			deny = true
			return ack(s, packet.PUBACK, 1, packet.Success)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := Drop(0)
			for d := range NumDrops {
				if strings.HasSuffix(tc.name, "/"+Drop(d).String()) {
					why = Drop(d)
				}
			}
			m := pub{topic: "t/m", payload: big, qos: 2, expiry: 30}.pooled()
			dropped := tc.run(t, testLimits(), m)
			var want Drops
			want[why] = 1
			if dropped != want {
				t.Errorf("dropped %q, want %q", dropped, want)
			}
			m.Release() // the publisher is done
			if !recycled(m) {
				t.Error("the dropped entry kept its reference: the message is not recycled")
			}
		})
	}
}
