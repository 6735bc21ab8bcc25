package session

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestWillPublishable: a will without expiry is published as it is; one with expiry gets
// its deadline from when it is published (3.1.3.2.4), leaving the stored will unchanged.
func TestWillPublishable(t *testing.T) {
	m := NewLocalMessage("will/t", []byte("gone"), 1, true)
	w := &Will{Msg: m}
	if got := w.Publishable(at(0)); got != m {
		t.Error("a will without expiry was copied")
	}
	w.Expiry = 30
	now := at(time.Hour)
	got := w.Publishable(now)
	if got == m || m.Expiry != 0 {
		t.Fatal("the stored will was changed")
	}
	if want := now + int64(30*time.Second); got.Expiry != want {
		t.Errorf("Expiry = %d, want %d", got.Expiry, want)
	}
	if string(got.Topic()) != "will/t" || string(got.Payload()) != "gone" || got.QoS != 1 || !got.Retain {
		t.Errorf("will message changed: %q %q q%d retain %v", got.Topic(), got.Payload(), got.QoS, got.Retain)
	}
	// A subscriber reached 10 s later sees 20 s left.
	s, c := online(t, nil, ConnectInfo{})
	deliver(t, s, Delivery{Msg: got, QoS: 1}, now+int64(10*time.Second), Delivered)
	s.Flush()
	equalLines(t, "written", c.lines(t, packet.V5), []string{`PUBLISH "will/t" q1 id1 exp=20 "gone"`})
}

// TestWillAtMostOnce: TakeWill and PendingWill hand a will out once.
func TestWillAtMostOnce(t *testing.T) {
	w := &Will{Msg: msg("w", "x")}
	s, _ := online(t, nil, ConnectInfo{Will: w})
	if s.TakeWill() != w || s.TakeWill() != nil {
		t.Error("TakeWill: want the will, then nil")
	}
	s.SetPendingWill(w, 0)
	if s.PendingWill() != w || s.PendingWill() != nil {
		t.Error("PendingWill: want the will, then nil")
	}
}

func TestAttach(t *testing.T) {
	lim := testLimits()
	s := New(42, "cid", lim)
	if s.Online() || s.Conn() != nil || s.ID() != 42 || s.ClientID() != "cid" {
		t.Fatal("new session")
	}
	c := &fakeConn{}
	s.Attach(c, ConnectInfo{Version: packet.V311, Username: "u", Expiry: NoExpiry, NoProblemDetails: true}, nil, at(0))
	if !s.Online() || s.Conn() != c || s.Version() != packet.V311 || s.Username() != "u" ||
		s.Expiry() != NoExpiry || s.ProblemDetails() {
		t.Errorf("after Attach: online %v version %v user %q expiry %d problem details %v",
			s.Online(), s.Version(), s.Username(), s.Expiry(), s.ProblemDetails())
	}
	if s.clientRecvMax != lim.ReceiveMaximum {
		t.Errorf("receive window %d, want the broker's %d", s.clientRecvMax, lim.ReceiveMaximum)
	}
	s.SetExpiry(60)
	if s.Expiry() != 60 {
		t.Error("SetExpiry")
	}
	s.Detach(c)
	if s.Online() || s.Version() != packet.V311 || s.Username() != "u" {
		t.Error("Detach lost what the last connection said")
	}
}

// TestSend: packets are encoded for the connection's version; over the client's Maximum
// Packet Size the reason string and user properties go first [MQTT-3.1.2-25], and what
// still does not fit is not sent.
func TestSend(t *testing.T) {
	reason := []byte("a reason string that is long")
	user := []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}
	full := &packet.Suback{PacketID: 1, Codes: []packet.ReasonCode{0}, Props: packet.Properties{ReasonString: reason, User: user}}
	bare := &packet.Suback{PacketID: 1, Codes: []packet.ReasonCode{0}}
	for _, tc := range []struct {
		name string
		max  uint32
		p    func() packet.Packet
		want packet.Packet // nil: not sent
	}{
		{"suback/fits", uint32(full.Size(packet.V5)),
			func() packet.Packet { c := *full; return &c }, full},
		{"suback/stripped", uint32(full.Size(packet.V5) - 1),
			func() packet.Packet { c := *full; return &c }, bare},
		{"suback/too-large", uint32(bare.Size(packet.V5) - 1),
			func() packet.Packet { c := *full; return &c }, nil},
		{"puback/stripped", 4,
			func() packet.Packet {
				return &packet.Ack{PacketType: packet.PUBACK, PacketID: 2, Props: packet.Properties{ReasonString: reason}}
			}, &packet.Ack{PacketType: packet.PUBACK, PacketID: 2}},
		{"pingresp/unlimited", 0, func() packet.Packet { return packet.Pingresp{} }, packet.Pingresp{}},
		{"publish/too-large", 5,
			func() packet.Packet { return &packet.Publish{Topic: []byte("t"), Payload: []byte("xxxx")} }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{ClientMaxPacket: tc.max})
			dirtied := s.Send(tc.p())
			s.Flush()
			var want []byte
			if tc.want != nil {
				want = tc.want.AppendTo(nil, packet.V5)
			}
			if dirtied != (tc.want != nil) || !bytes.Equal(c.buf, want) {
				t.Errorf("dirtied %v, wrote % x; want % x", dirtied, c.buf, want)
			}
		})
	}
}

func TestSendOffline(t *testing.T) {
	s := New(1, "c", testLimits())
	if s.Send(packet.Pingresp{}) || s.out != nil {
		t.Error("Send while offline buffered a packet")
	}
	s.Flush() // no connection, nothing pending: no-op
	s.Disconnect(packet.ServerShuttingDown)
}

// TestDisconnect: a 5.0 client is told why; a 3.1.1 one only sees the connection close.
// Both get what was pending first.
func TestDisconnect(t *testing.T) {
	for _, tc := range []struct {
		v    packet.Version
		want []string
	}{
		{packet.V5, []string{`PUBLISH "t" q0 "x"`, "DISCONNECT rc=0x8b"}},
		{packet.V311, []string{`PUBLISH "t" q0 "x"`}},
	} {
		t.Run(fmt.Sprintf("v%v", tc.v), func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{Version: tc.v})
			deliver(t, s, Delivery{Msg: msg("t", "x")}, at(0), Delivered)
			s.Disconnect(packet.ServerShuttingDown)
			if !c.shutdown || c.closed {
				t.Errorf("shutdown %v closed %v; want a graceful shutdown", c.shutdown, c.closed)
			}
			equalLines(t, "written", c.lines(t, tc.v), tc.want)
		})
	}
}

// TestCounters: PUBLISH packets are counted by QoS when encoded, bytes when flushed.
func TestCounters(t *testing.T) {
	lim := testLimits()
	var sent [3]counter
	var bytesSent counter
	lim.Sent = &[3]Counter{&sent[0], &sent[1], &sent[2]}
	lim.BytesSent = &bytesSent
	s, c := online(t, lim, ConnectInfo{ClientRecvMax: 2})
	for _, qos := range []uint8{0, 0, 1, 2, 1} { // the last QoS 1 waits in the queue
		deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: qos}, at(0), Delivered)
	}
	deliver(t, s, Delivery{Msg: msg("t", "x")}, at(time.Hour), Delivered)
	s.Flush()
	if sent != [3]counter{3, 1, 1} {
		t.Errorf("sent by QoS %v, want [3 1 1]", sent)
	}
	if int(bytesSent) != len(c.buf) {
		t.Errorf("counted %d bytes, wrote %d", bytesSent, len(c.buf))
	}
	reconnect(t, s, c, ConnectInfo{ClientRecvMax: 2}, at(0))
	if sent != [3]counter{3, 2, 2} { // resent with DUP
		t.Errorf("after resume: sent by QoS %v, want [3 2 2]", sent)
	}
}

func TestSubs(t *testing.T) {
	s := New(1, "c", testLimits())
	a := Sub{Filter: "a/#", Opts: SubOpts{QoS: 1}, ID: 1}
	b := Sub{Filter: "b", ID: 2}
	if s.AddSub(a) || s.AddSub(b) {
		t.Fatal("AddSub of new filters reported a replacement")
	}
	a2 := a
	a2.ID = 3
	if !s.AddSub(a2) {
		t.Error("AddSub of the same filter did not replace")
	}
	subs := s.Subs()
	if fmt.Sprint(subs) != fmt.Sprint([]Sub{a2, b}) {
		t.Errorf("Subs() = %v", subs)
	}
	subs[0].Filter = "changed" // a copy
	if s.RemoveSub([]byte("changed")) || !s.RemoveSub([]byte("a/#")) || s.RemoveSub([]byte("a/#")) {
		t.Error("RemoveSub")
	}
	if got, _ := s.Clear(); fmt.Sprint(got) != fmt.Sprint([]Sub{b}) || s.Subs() != nil {
		t.Errorf("Clear returned %v, left %v", got, s.Subs())
	}
}

// TestClear: a clean start forgets the window and the queue, and reports what it
// dropped: the message in flight and the one queued behind it, each once.
func TestClear(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientRecvMax: 1})
	deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("t", "y"), QoS: 2}, at(0), Delivered)
	s.Flush()
	s.Detach(c)
	if _, ds := s.Clear(); ds.String() != "session_ended=2" {
		t.Errorf("Clear dropped %q, want session_ended=2", ds.String())
	}
	if _, ds := s.Clear(); ds.String() != "" {
		t.Errorf("a second Clear dropped %q, want nothing", ds.String())
	}
	c = &fakeConn{}
	if d, _ := s.Attach(c, ConnectInfo{Version: packet.V5}, nil, at(0)); d || s.fl != nil {
		t.Error("Attach after Clear had something to send")
	}
}
