package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// BenchmarkPumpACL: a QoS 1 message through the queue into a window of one (delivered,
// queued behind the one in flight, pumped by its PUBACK), without an ACL and with the
// read check at the exit against a small ACL file, and with a message the check drops
// before each one.
func BenchmarkPumpACL(b *testing.B) {
	path := filepath.Join(b.TempDir(), "acl")
	if err := os.WriteFile(path, []byte("user alice\ntopic read alice/#\npattern read devices/%u/#\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	a, err := auth.New(conf.Auth{ACLFile: path}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, withACL := range []bool{false, true} {
		name := "ACL=none"
		if withACL {
			name = "ACL=file"
		}
		b.Run(name, func(b *testing.B) {
			lim := testLimits()
			if withACL {
				lim.MayRead = func(user string, _ uint8, cid string, topic []byte) bool {
					return a.Allow(user, cid, auth.Read, string(topic))
				}
			}
			s, c := online(b, lim, ConnectInfo{Version: packet.V311, ClientRecvMax: 1, Username: "alice"})
			m := msg("alice/x", "payload")
			d := Delivery{Msg: m, QoS: 1}
			s.Deliver(d, at(0))
			s.Flush()
			c.take()
			pid := uint16(1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s.Deliver(d, at(0)) // queued behind the one in flight
				s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: pid}, at(0))
				s.Flush()
				c.buf = c.buf[:0]
				pid = pid%65535 + 1
			}
		})
	}
	// ACL=denied: a message the ACL denies waits in the queue before each one it lets
	// through; the PUBACK's pump drops it and reports the drop (session.Drops).
	b.Run("ACL=denied", func(b *testing.B) {
		lim := testLimits()
		lim.MayRead = func(user string, _ uint8, cid string, topic []byte) bool {
			return a.Allow(user, cid, auth.Read, string(topic))
		}
		s, c := online(b, lim, ConnectInfo{Version: packet.V311, ClientRecvMax: 1, Username: "alice"})
		ok := Delivery{Msg: msg("alice/x", "payload"), QoS: 1}
		denied := Delivery{Msg: msg("bob/x", "payload"), QoS: 1}
		s.Deliver(ok, at(0))
		s.Flush()
		c.take()
		pid := uint16(1)
		drops := 0
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			s.Deliver(denied, at(0)) // queued behind the one in flight
			s.Deliver(ok, at(0))
			_, dropped := s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: pid}, at(0))
			drops += int(dropped[DropDenied])
			s.Flush()
			c.buf = c.buf[:0]
			pid = pid%65535 + 1
		}
		if drops != b.N {
			b.Fatalf("%d drops reported, want %d", drops, b.N)
		}
	})
}
