package session

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestGateHolds: output encoded after a Gate is taken waits until every gate is open,
// in order; what came before goes at once.
func TestGateHolds(t *testing.T) {
	s, c := online(t, testLimits(), ConnectInfo{Version: packet.V5})
	s.Send(packet.Pingresp{})
	s.Flush()
	g1 := s.Gate()
	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	g2 := s.Gate()
	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2})
	s.Flush()
	equalLines(t, "before the gates open", c.lines(t, packet.V5), []string{"PINGRESP"})
	c.take()
	g2.Open()
	s.Flush()
	if len(c.buf) != 0 || !s.Held() {
		t.Fatalf("written with a gate still closed: %s", c)
	}
	g1.Open()
	equalLines(t, "after the gates open", c.lines(t, packet.V5), []string{"PUBACK id1", "PUBACK id2"})
	if s.Held() {
		t.Fatal("still held")
	}
}

// TestGateWithStore: a gate and the store's hold both hold the output; it goes once
// both are released, whichever comes last.
func TestGateWithStore(t *testing.T) {
	st := &stepStore{}
	lim, j := journalLimits(st)
	s, c := online(t, lim, ConnectInfo{Version: packet.V5})
	g := s.Gate()
	s.SendDurable(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	j.Commit()
	st.finish(t, nil)
	s.Flush()
	if len(c.buf) != 0 {
		t.Fatalf("written with the gate closed: %s", c)
	}
	g.Open()
	equalLines(t, "after both", c.lines(t, packet.V5), []string{"PUBACK id1"})
}

// TestGateOfClosedConnection: a gate of a connection that closed opens nothing on the
// session's next connection.
func TestGateOfClosedConnection(t *testing.T) {
	s, c := online(t, testLimits(), ConnectInfo{Version: packet.V5})
	old := s.Gate()
	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	c2 := reconnect(t, s, c, ConnectInfo{Version: packet.V5}, at(0))
	c2.take()
	g := s.Gate()
	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2})
	old.Open()
	s.Flush()
	if len(c2.buf) != 0 {
		t.Fatalf("a stale gate opened the new connection's: %s", c2)
	}
	g.Open()
	equalLines(t, "after its own gate", c2.lines(t, packet.V5), []string{"PUBACK id2"})
}

// TestSendGated: the acknowledgement is held by a gate of two holds, taken with it, and
// goes once both are opened, with the store's hold too when durable; a held
// acknowledgement asks for no flush, since its releaser writes it.
func TestSendGated(t *testing.T) {
	for _, durable := range []bool{false, true} {
		st := &stepStore{}
		lim, j := journalLimits(st)
		s, c := online(t, lim, ConnectInfo{Version: packet.V5})
		flush, g := s.SendGated(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, 2, durable)
		if flush {
			t.Fatalf("durable %v: a held acknowledgement asks for a flush", durable)
		}
		if durable {
			j.Commit()
			st.finish(t, nil)
		}
		g.Open()
		s.Flush()
		if len(c.buf) != 0 || !s.Held() {
			t.Fatalf("durable %v: written with one hold of two: %s", durable, c)
		}
		g.Open()
		equalLines(t, "after both holds", c.lines(t, packet.V5), []string{"PUBACK id1"})
		if s.Held() {
			t.Fatalf("durable %v: still held", durable)
		}
	}
	s, _ := online(t, testLimits(), ConnectInfo{Version: packet.V5})
	if flush, g := s.SendGated(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, 0, false); !flush || g != (Gate{}) {
		t.Fatalf("no gate asked for: flush %v, gate %+v", flush, g)
	}
}
