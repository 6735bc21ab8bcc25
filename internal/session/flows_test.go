package session

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestAckQoS1: PUBACK frees the slot; once nothing is left the traffic state goes.
func TestAckQoS1(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered)
	s.Flush()
	c.take()
	ack(s, packet.PUBACK, 1, packet.Success)
	if s.fl != nil {
		t.Error("traffic state kept after the last PUBACK")
	}
	// A second PUBACK for the same id is a no-op.
	if d, dropped := s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0)); d || dropped != (Drops{}) {
		t.Errorf("duplicate PUBACK: dirtied %v dropped %v", d, dropped)
	}
	if len(c.buf) > 0 {
		t.Errorf("wrote %v", c)
	}
}

// TestAckQoS2: PUBREC is answered by PUBREL and keeps the slot; PUBCOMP frees it.
func TestAckQoS2(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%v", v), func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{Version: v})
			deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 2}, at(0), Delivered)
			s.Flush()
			c.take()
			ack(s, packet.PUBCOMP, 1, packet.Success) // before PUBREC: ignored
			if in, _ := s.Pending(); in != 1 {
				t.Fatalf("PUBCOMP before PUBREC freed the slot")
			}
			ack(s, packet.PUBREC, 1, packet.Success)
			ack(s, packet.PUBREC, 1, packet.Success) // a duplicate is answered again
			want := []byte{0x62, 2, 0, 1}
			if !bytes.Equal(c.buf, append(want, want...)) {
				t.Errorf("wrote % x, want PUBREL % x twice", c.buf, want)
			}
			c.take()
			if in, _ := s.Pending(); in != 1 {
				t.Fatalf("PUBREC freed the slot")
			}
			if s.fl.inflight[0].msg != nil {
				t.Error("the message is kept after PUBREC")
			}
			ack(s, packet.PUBACK, 1, packet.Success) // wrong ack type: ignored
			if in, _ := s.Pending(); in != 1 {
				t.Fatalf("PUBACK freed a QoS 2 slot")
			}
			ack(s, packet.PUBCOMP, 1, packet.Success)
			if s.fl != nil {
				t.Error("traffic state kept after the last PUBCOMP")
			}
			if len(c.buf) > 0 {
				t.Errorf("wrote %v", c)
			}
		})
	}
}

// TestAckPubrecUnknown: a PUBREC for an id not awaiting one is answered with PUBREL
// 0x92 Packet Identifier not found (a bare PUBREL in 3.1.1), and changes nothing.
func TestAckPubrecUnknown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       packet.Version
		inQoS   uint8 // the QoS of the message in flight as id 1, 0 none
		pubrec  uint16
		want    []byte
		inAfter int
	}{
		{"v5/idle", packet.V5, 0, 9, []byte{0x62, 3, 0, 9, 0x92}, 0},
		{"v5/other-id", packet.V5, 2, 9, []byte{0x62, 3, 0, 9, 0x92}, 1},
		{"v5/qos1-id", packet.V5, 1, 1, []byte{0x62, 3, 0, 1, 0x92}, 1},
		{"v311/idle", packet.V311, 0, 9, []byte{0x62, 2, 0, 9}, 0},
		{"v311/qos1-id", packet.V311, 1, 1, []byte{0x62, 2, 0, 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{Version: tc.v})
			if tc.inQoS > 0 {
				deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: tc.inQoS}, at(0), Delivered)
				s.Flush()
				c.take()
			}
			if d, _ := s.Ack(&packet.Ack{PacketType: packet.PUBREC, PacketID: tc.pubrec}, at(0)); !d {
				t.Error("not dirtied")
			}
			s.Flush()
			if !bytes.Equal(c.buf, tc.want) {
				t.Errorf("wrote % x, want % x", c.buf, tc.want)
			}
			if in, _ := s.Pending(); in != tc.inAfter {
				t.Errorf("%d inflight, want %d", in, tc.inAfter)
			}
			if tc.inAfter == 0 && s.fl != nil {
				t.Error("traffic state allocated")
			}
		})
	}
}

// TestAckUnknownIgnored: PUBACK and PUBCOMP for ids not awaiting them write nothing.
func TestAckUnknownIgnored(t *testing.T) {
	for _, typ := range []packet.Type{packet.PUBACK, packet.PUBCOMP} {
		t.Run(typ.String(), func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{})
			if d, dropped := s.Ack(&packet.Ack{PacketType: typ, PacketID: 5}, at(0)); d || dropped != (Drops{}) {
				t.Errorf("idle session: dirtied %v dropped %v", d, dropped)
			}
			deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered)
			s.Flush()
			c.take()
			if d, dropped := s.Ack(&packet.Ack{PacketType: typ, PacketID: 5}, at(0)); d || dropped != (Drops{}) {
				t.Errorf("dirtied %v dropped %v", d, dropped)
			}
			s.Flush()
			if in, _ := s.Pending(); in != 1 || len(c.buf) > 0 {
				t.Errorf("%d inflight, wrote %v", in, c)
			}
		})
	}
}

// TestAckPubrecError: a v5 PUBREC with a reason code of 0x80 or above ends the exchange:
// no PUBREL, the slot is freed and the queue moves on (spec 4.3.3).
func TestAckPubrecError(t *testing.T) {
	for _, tc := range []struct {
		code packet.ReasonCode
		want []string
	}{
		{packet.UnspecifiedError, []string{`PUBLISH "t" q1 id2 "next"`}},
		{packet.NotAuthorized, []string{`PUBLISH "t" q1 id2 "next"`}},
		{packet.QuotaExceeded, []string{`PUBLISH "t" q1 id2 "next"`}},
		{packet.NoMatchingSubscribers, []string{"PUBREL id1"}}, // 0x10 is a success
	} {
		t.Run(fmt.Sprintf("rc=%#x", byte(tc.code)), func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{ClientRecvMax: 1})
			deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 2}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: msg("t", "next"), QoS: 1}, at(0), Delivered)
			s.Flush()
			c.take()
			ack(s, packet.PUBREC, 1, tc.code)
			equalLines(t, "after PUBREC", c.lines(t, packet.V5), tc.want)
			if !tc.code.IsError() {
				return
			}
			ack(s, packet.PUBCOMP, 1, packet.Success) // too late: ignored
			ack(s, packet.PUBACK, 2, packet.Success)
			if s.fl != nil {
				t.Error("traffic state kept after the last ack")
			}
			if len(c.buf) > 0 {
				t.Errorf("wrote %v", c)
			}
		})
	}
}

// TestFlowsReleased: the traffic state lives while anything needs it and goes when the
// last of it is acknowledged or released, whatever the order.
func TestFlowsReleased(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientRecvMax: 2})
	if s.fl != nil {
		t.Fatal("new session has traffic state")
	}
	deliver(t, s, Delivery{Msg: msg("t", "0")}, at(0), Delivered)
	if s.fl != nil {
		t.Fatal("QoS 0 created traffic state")
	}
	deliver(t, s, Delivery{Msg: msg("t", "1"), QoS: 2}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("t", "2"), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("t", "3"), QoS: 1}, at(0), Delivered) // queued
	if dup, full := s.ReceiveQoS2(7); dup || full {
		t.Fatalf("ReceiveQoS2: dup %v full %v", dup, full)
	}
	s.Flush()
	steps := []func(){
		func() { ack(s, packet.PUBACK, 2, packet.Success) }, // 3 takes its slot as id 3
		func() { ack(s, packet.PUBREC, 1, packet.Success) },
		func() { ack(s, packet.PUBACK, 3, packet.Success) },
		func() { ack(s, packet.PUBCOMP, 1, packet.Success) },
		func() { s.Release(7) },
	}
	for i, step := range steps {
		if s.fl == nil {
			t.Fatalf("traffic state gone before step %d", i)
		}
		step()
	}
	if s.fl != nil {
		t.Errorf("traffic state kept: %+v", *s.fl)
	}
	equalLines(t, "written", c.lines(t, packet.V5), []string{
		`PUBLISH "t" q0 "0"`,
		`PUBLISH "t" q2 id1 "1"`,
		`PUBLISH "t" q1 id2 "2"`,
		`PUBLISH "t" q1 id3 "3"`,
		`PUBREL id1`,
	})
}

// TestQueueOrder: messages leave the queue in the order they entered it, across the
// queue's compaction and while new ones arrive.
func TestQueueOrder(t *testing.T) {
	lim := testLimits()
	lim.QueueMessages = 1000
	s, c := online(t, lim, ConnectInfo{ClientRecvMax: 1})
	next := 0
	add := func(n int) {
		for range n {
			deliver(t, s, Delivery{Msg: msg("t", fmt.Sprint(next)), QoS: 1}, at(0), Delivered)
			next++
		}
	}
	add(150)
	var got []string
	for i := 0; ; i++ {
		s.Flush()
		ps := c.packets(t, packet.V5)
		if len(ps) != 1 {
			if len(ps) == 0 && i > 0 {
				break
			}
			t.Fatalf("step %d: %d packets written", i, len(ps))
		}
		p := ps[0].(*packet.Publish)
		got = append(got, string(p.Payload))
		if i%3 == 0 && next < 300 {
			add(2)
		}
		ack(s, packet.PUBACK, p.PacketID, packet.Success)
	}
	if len(got) != next {
		t.Fatalf("%d messages written, %d delivered", len(got), next)
	}
	for i, p := range got {
		if p != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, p)
		}
	}
	if s.fl != nil {
		t.Error("traffic state kept")
	}
}

// TestResume: after a reconnect the window goes again in order, PUBLISH with DUP for
// what was not received and PUBREL for what was [MQTT-4.4.0-1], [MQTT-4.4.0-2]; then the
// queue fills the client's new window.
func TestResume(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%v", v), func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{Version: v, ClientRecvMax: 3})
			deliver(t, s, Delivery{Msg: msg("t", "1"), QoS: 1, Retain: true}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: msg("t", "2"), QoS: 2}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: msg("t", "3"), QoS: 2}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: msg("t", "4"), QoS: 1}, at(0), Delivered) // queued
			deliver(t, s, Delivery{Msg: msg("t", "5"), QoS: 2}, at(0), Delivered) // queued
			s.Flush()
			ack(s, packet.PUBREC, 3, packet.Success)
			c.take()
			s.Detach(c)
			deliver(t, s, Delivery{Msg: msg("t", "6"), QoS: 1}, at(0), Delivered)
			deliver(t, s, Delivery{Msg: msg("t", "7"), QoS: 0}, at(0), DropOffline)
			if s.Online() || s.Conn() != nil {
				t.Fatal("online after Detach")
			}

			c = &fakeConn{}
			if d, _ := s.Attach(c, ConnectInfo{Version: v, ClientRecvMax: 5}, nil, at(0)); !d {
				t.Error("Attach did not dirty the session it resumed")
			}
			s.Flush()
			equalLines(t, "resumed", c.lines(t, v), []string{
				`PUBLISH "t" q1 id1 dup retain "1"`,
				`PUBLISH "t" q2 id2 dup "2"`,
				`PUBREL id3`,
				`PUBLISH "t" q1 id4 "4"`,
				`PUBLISH "t" q2 id5 "5"`,
			})
			if in, q := s.Pending(); in != 5 || q != 1 {
				t.Errorf("Pending() = %d, %d; want 5, 1", in, q)
			}
			ack(s, packet.PUBACK, 1, packet.Success)
			equalLines(t, "after PUBACK", c.lines(t, v), []string{`PUBLISH "t" q1 id6 "6"`})
		})
	}
}

// TestResumeWindow: a client that comes back with a smaller Receive Maximum gets no more
// PUBLISHes at once than it now accepts [MQTT-3.3.4-9]: released QoS 2 entries keep their
// slots, the resends beyond the room wait with their packet ids and go, DUP set, as
// acknowledgements free slots [MQTT-4.4.0-1], before anything queued. A waiting message
// the client acknowledges anyway (it had received it) is not sent again.
func TestResumeWindow(t *testing.T) {
	v := packet.V5 // before 5.0 the window is the broker's, the same on every connection
	s, c := online(t, nil, ConnectInfo{Version: v, ClientRecvMax: 5})
	deliver(t, s, Delivery{Msg: msg("t", "1"), QoS: 2}, at(0), Delivered)
	for _, p := range []string{"2", "3", "4", "5"} {
		deliver(t, s, Delivery{Msg: msg("t", p), QoS: 1}, at(0), Delivered)
	}
	deliver(t, s, Delivery{Msg: msg("t", "6"), QoS: 1}, at(0), Delivered) // queued
	s.Flush()
	ack(s, packet.PUBREC, 1, packet.Success)
	c.take()

	c = reconnect(t, s, c, ConnectInfo{Version: v, ClientRecvMax: 2}, at(0))
	equalLines(t, "resumed", c.lines(t, v), []string{
		`PUBREL id1`,
		`PUBLISH "t" q1 id2 dup "2"`,
	})
	if in, q := s.Pending(); in != 5 || q != 1 {
		t.Errorf("Pending() = %d, %d; want 5 (2 sent, 3 waiting), 1", in, q)
	}
	deliver(t, s, Delivery{Msg: msg("t", "7"), QoS: 1}, at(0), Delivered) // queued behind
	equalLines(t, "a new message while entries wait", c.lines(t, v), nil)
	ack(s, packet.PUBCOMP, 1, packet.Success)
	equalLines(t, "after PUBCOMP", c.lines(t, v), []string{`PUBLISH "t" q1 id3 dup "3"`})
	ack(s, packet.PUBACK, 4, packet.Success) // received before the reconnect
	equalLines(t, "after PUBACK of a waiting one", c.lines(t, v), nil)
	ack(s, packet.PUBACK, 2, packet.Success)
	equalLines(t, "after PUBACK 2", c.lines(t, v), []string{`PUBLISH "t" q1 id5 dup "5"`})
	ack(s, packet.PUBACK, 3, packet.Success)
	equalLines(t, "after PUBACK 3", c.lines(t, v), []string{`PUBLISH "t" q1 id6 "6"`})
	ack(s, packet.PUBACK, 5, packet.Success)
	equalLines(t, "after PUBACK 5", c.lines(t, v), []string{`PUBLISH "t" q1 id7 "7"`})
	ack(s, packet.PUBACK, 6, packet.Success)
	ack(s, packet.PUBACK, 7, packet.Success)
	if in, q := s.Pending(); in != 0 || q != 0 {
		t.Errorf("Pending() = %d, %d at the end", in, q)
	}

	// A second reconnect while entries wait applies the new window afresh. (The traffic
	// state went with the last acknowledgement: packet ids start again at 1.)
	for _, p := range []string{"a", "b", "c"} {
		deliver(t, s, Delivery{Msg: msg("t", p), QoS: 1}, at(0), Delivered) // c queued
	}
	s.Flush()
	c.take()
	c = reconnect(t, s, c, ConnectInfo{Version: v, ClientRecvMax: 1}, at(0))
	equalLines(t, "window 1", c.lines(t, v), []string{`PUBLISH "t" q1 id1 dup "a"`})
	c = reconnect(t, s, c, ConnectInfo{Version: v, ClientRecvMax: 3}, at(0))
	equalLines(t, "window 3", c.lines(t, v), []string{
		`PUBLISH "t" q1 id1 dup "a"`,
		`PUBLISH "t" q1 id2 dup "b"`,
		`PUBLISH "t" q1 id3 "c"`,
	})
}

// TestResumeExpired: a message that expired while the client was away is not sent again,
// and if nothing else is left the traffic state goes.
func TestResumeExpired(t *testing.T) {
	// A message whose delivery has started is completed after a reconnect even when its
	// expiry has passed meanwhile [MQTT-3.3.2-5], [MQTT-4.4.0-1]: it is resent with DUP and
	// the smallest expiry, 1 second.
	s, c := online(t, nil, ConnectInfo{Version: packet.V5})
	deliver(t, s, Delivery{Msg: pub{topic: "t", payload: "x", expiry: 5}.owned(), QoS: 1}, at(0), Delivered)
	s.Flush()
	c = reconnect(t, s, c, ConnectInfo{Version: packet.V5}, at(10*time.Second))
	pkts := c.packets(t, packet.V5)
	if len(pkts) != 1 {
		t.Fatalf("wrote %d packets, want the one resend", len(pkts))
	}
	p, ok := pkts[0].(*packet.Publish)
	if !ok {
		t.Fatalf("wrote %T", pkts[0])
	}
	if !p.Dup || p.PacketID != 1 || !p.Props.MessageExpiry.Set || p.Props.MessageExpiry.V != 1 {
		t.Errorf("resend: dup %v id %d expiry %+v", p.Dup, p.PacketID, p.Props.MessageExpiry)
	}
	if in, _ := s.Pending(); in != 1 {
		t.Errorf("inflight %d, want 1 until acknowledged", in)
	}
}

// TestResumeIdle: attaching a session without traffic writes nothing but its CONNACK.
func TestResumeIdle(t *testing.T) {
	s, c := New(1, "client", testLimits()), &fakeConn{}
	if d, _ := s.Attach(c, ConnectInfo{Version: packet.V5}, nil, at(0)); d {
		t.Error("dirtied")
	}
	s.Flush()
	if len(c.buf) > 0 {
		t.Errorf("wrote %v", c)
	}
}

// TestDetachShared: Detach hands back, for redelivery to the group, the shared
// subscription messages the client has not received: in flight before PUBREC, or queued.
func TestDetachShared(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientRecvMax: 3})
	m := msg("t", "x")
	ds := []Delivery{
		{Msg: m, QoS: 1, Retain: true, SubID: 5, More: []uint32{6}, Share: "$share/g/t"}, // id1
		{Msg: m, QoS: 1},                      // id2
		{Msg: m, QoS: 2, Share: "$share/g/t"}, // id3, past PUBREC
		{Msg: m, QoS: 2, Share: "$share/h/#"}, // queued
		{Msg: m, QoS: 1, SubID: 9},            // queued
		{Msg: m, QoS: 1, Share: "$share/g/t"}, // queued
		{Msg: m, QoS: 0, Share: "$share/g/t"}, // written at once: nothing to hand back
	}
	for _, d := range ds {
		deliver(t, s, d, at(0), Delivered)
	}
	s.Flush()
	ack(s, packet.PUBREC, 3, packet.Success)

	if shared, ok := s.Detach(&fakeConn{}); ok || shared != nil {
		t.Fatalf("Detach of another connection: %v, %v", shared, ok)
	}
	if !s.Online() {
		t.Fatal("Detach of another connection took the session offline")
	}
	shared, ok := s.Detach(c)
	if !ok {
		t.Fatal("Detach failed")
	}
	want := []Delivery{ds[0], ds[3], ds[5]}
	if fmt.Sprintf("%+v", shared) != fmt.Sprintf("%+v", want) {
		t.Errorf("shared:\ngot  %+v\nwant %+v", shared, want)
	}
	c = &fakeConn{}
	s.Attach(c, ConnectInfo{Version: packet.V5, ClientRecvMax: 3}, nil, at(0))
	s.Flush()
	equalLines(t, "resumed", c.lines(t, packet.V5), []string{
		`PUBLISH "t" q1 id2 dup "x"`,
		`PUBREL id3`,
		`PUBLISH "t" q1 id4 subs=[9] "x"`,
	})
}

// TestDetachSharedReference: a message Detach hands back keeps its entry's reference
// until the caller, having delivered it again, lets it go; a member that takes it holds
// its own.
func TestDetachSharedReference(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	m := pub{topic: "t", payload: "x", qos: 1}.pooled()
	deliver(t, s, Delivery{Msg: m, QoS: 1, Share: "$share/g/t"}, at(0), Delivered)
	m.Release() // the publisher is done
	shared, _ := s.Detach(c)
	if len(shared) != 1 || recycled(m) {
		t.Fatalf("Detach handed back %d, recycled %v; want the message, held", len(shared), recycled(m))
	}
	other, _ := online(t, nil, ConnectInfo{})
	deliver(t, other, shared[0], at(0), Delivered)
	shared[0].Msg.Release()
	if recycled(m) {
		t.Fatal("recycled while the other member has it in flight")
	}
	ack(other, packet.PUBACK, 1, packet.Success)
	if !recycled(m) {
		t.Fatal("not recycled once the other member acknowledged it")
	}
}

// TestDetachReleasesFlows: after Detach, an offline session with nothing in flight holds
// no traffic state, topic aliases (which die with the connection) included.
func TestDetachReleasesFlows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*Session)
	}{
		{"shared-only", func(s *Session) {
			deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1, Share: "$share/g/t"}, at(0), Delivered)
		}},
		{"alias-out", func(s *Session) {
			deliver(t, s, Delivery{Msg: msg("t", "x")}, at(0), Delivered)
		}},
		{"alias-in", func(s *Session) {
			p := &packet.Publish{Topic: []byte("t"), Props: packet.Properties{TopicAlias: packet.Some[uint16](1)}}
			if _, err := s.ResolveTopic(p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{ClientAliasMax: 5})
			tc.setup(s)
			if s.fl == nil {
				t.Fatal("no traffic state to release")
			}
			s.Flush()
			s.Detach(c)
			if s.fl != nil {
				t.Errorf("offline session keeps traffic state: %+v", *s.fl)
			}
		})
	}
}

// TestDetachDropsPending: bytes encoded but not flushed when the connection closes are
// not written anywhere.
func TestDetachDropsPending(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	deliver(t, s, Delivery{Msg: msg("t", "x")}, at(0), Delivered)
	s.Detach(c)
	s.Flush()
	if s.out != nil || len(c.buf) > 0 {
		t.Errorf("pending bytes kept or written: %v", c)
	}
}

// TestReceiveQoS2: inbound QoS 2 ids wait for PUBREL, a repeated PUBLISH is reported as a
// duplicate, the broker's Receive Maximum bounds them [MQTT-3.3.4-9], and they survive a
// reconnect (spec 4.3.3).
func TestReceiveQoS2(t *testing.T) {
	lim := testLimits()
	lim.ReceiveMaximum = 2
	s, c := online(t, lim, ConnectInfo{})
	if s.Release(1) {
		t.Error("Release on an idle session")
	}
	type result struct{ dup, full bool }
	for _, step := range []struct {
		pid  uint16
		want result
	}{
		{1, result{}},
		{1, result{dup: true}},
		{2, result{}},
		{3, result{full: true}},
		{2, result{dup: true}},
	} {
		if dup, full := s.ReceiveQoS2(step.pid); (result{dup, full}) != step.want {
			t.Fatalf("ReceiveQoS2(%d) = %v, %v; want %+v", step.pid, dup, full, step.want)
		}
	}
	if s.Release(3) {
		t.Error("Release(3) of an id never recorded")
	}
	if !s.Release(1) || s.Release(1) {
		t.Error("Release(1) twice: want true, then false")
	}
	if dup, full := s.ReceiveQoS2(3); dup || full {
		t.Errorf("ReceiveQoS2(3) after a release: dup %v full %v", dup, full)
	}
	c = reconnect(t, s, c, ConnectInfo{}, at(0))
	if dup, _ := s.ReceiveQoS2(2); !dup {
		t.Error("id 2 forgotten across a reconnect")
	}
	if len(c.buf) > 0 {
		t.Errorf("the resume wrote %v", c)
	}
	s.Release(2)
	s.Release(3)
	if s.fl != nil {
		t.Error("traffic state kept after the last PUBREL")
	}
	s.ReceiveQoS2(4)
	s.Clear()
	if s.Release(4) {
		t.Error("Clear kept the inbound ids")
	}
}

// TestResolveTopic: inbound topic aliases (spec 3.3.2.3.4), one step after another on one
// connection.
func TestResolveTopic(t *testing.T) {
	lim := testLimits()
	lim.TopicAliasMaximum = 2
	s, _ := online(t, lim, ConnectInfo{})
	for i, step := range []struct {
		topic string
		alias uint16 // 0: none
		want  string
		err   error
	}{
		{"a/b", 0, "a/b", nil},
		{"", 1, "", ErrAliasUnknown},
		{"a/b", 3, "", ErrAliasInvalid},
		{"a/b", 1, "a/b", nil},
		{"", 1, "a/b", nil},
		{"c", 2, "c", nil},
		{"", 2, "c", nil},
		{"d/e", 1, "d/e", nil}, // remapped
		{"", 1, "d/e", nil},
		{"", 2, "c", nil},
		{"", 3, "", ErrAliasInvalid},
	} {
		p := &packet.Publish{Topic: []byte(step.topic)}
		if step.alias != 0 {
			p.Props.TopicAlias = packet.Some(step.alias)
		}
		got, err := s.ResolveTopic(p)
		if err != step.err || string(got) != step.want {
			t.Fatalf("step %d: ResolveTopic(%q, alias %d) = %q, %v; want %q, %v",
				i, step.topic, step.alias, got, err, step.want, step.err)
		}
		// The topic read buffer is reused for the next packet.
		for j := range p.Topic {
			p.Topic[j] = 'X'
		}
	}
	if !errors.Is(ErrAliasInvalid, packet.TopicAliasInvalid) || !errors.Is(ErrAliasUnknown, packet.ProtocolError) {
		t.Error("alias errors do not carry their reason codes")
	}
}

// TestResolveTopicPerConnection: inbound aliases die with the connection; a broker that
// allows none refuses every alias.
func TestResolveTopicPerConnection(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	set := &packet.Publish{Topic: []byte("a"), Props: packet.Properties{TopicAlias: packet.Some[uint16](1)}}
	use := &packet.Publish{Props: packet.Properties{TopicAlias: packet.Some[uint16](1)}}
	if _, err := s.ResolveTopic(set); err != nil {
		t.Fatal(err)
	}
	reconnect(t, s, c, ConnectInfo{}, at(0))
	if _, err := s.ResolveTopic(use); err != ErrAliasUnknown {
		t.Errorf("alias from the last connection: err %v", err)
	}

	lim := testLimits()
	lim.TopicAliasMaximum = 0
	s, _ = online(t, lim, ConnectInfo{})
	if _, err := s.ResolveTopic(set); err != ErrAliasInvalid {
		t.Errorf("TopicAliasMaximum 0: err %v", err)
	}
}

// TestAllocPID: packet ids wrap from 65535 to 1, never 0 [MQTT-2.2.1-3], and skip the ids
// still in flight [MQTT-2.2.1-2].
func TestAllocPID(t *testing.T) {
	f := &flows{nextPID: 65533, inflight: []entry{{pid: 65535}, {pid: 1}, {pid: 3}}}
	var got []uint16
	for range 3 {
		pid := f.allocPID()
		got = append(got, pid)
		f.inflight = append(f.inflight, entry{pid: pid})
	}
	if fmt.Sprint(got) != "[65534 2 4]" {
		t.Errorf("allocated %v, want [65534 2 4]", got)
	}
}

// TestPIDReuse: an acknowledged id is free again once the counter comes round.
func TestPIDReuse(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered) // id1, stays
	s.fl.nextPID = 65534
	for range 3 {
		deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered)
	}
	s.Flush()
	var ids []uint16
	for _, p := range c.packets(t, packet.V5) {
		ids = append(ids, p.(*packet.Publish).PacketID)
	}
	if fmt.Sprint(ids) != "[1 65535 2 3]" {
		t.Errorf("ids %v, want [1 65535 2 3]", ids)
	}
}

// TestDetachSharedQoS2Stays: a QoS 2 message sent through a shared subscription and not
// yet acknowledged stays with its member, to be completed when it returns, and is never
// handed to another member [MQTT-4.8.2-4], [MQTT-4.8.2-5]; a QoS 1 one is handed back.
func TestDetachSharedQoS2Stays(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	m := msg("t", "x")
	deliver(t, s, Delivery{Msg: m, QoS: 2, Share: "$share/g/t"}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: m, QoS: 1, Share: "$share/g/t"}, at(0), Delivered)
	s.Flush()
	shared, ok := s.Detach(c)
	if !ok {
		t.Fatal("not attached")
	}
	if len(shared) != 1 || shared[0].QoS != 1 {
		t.Fatalf("handed back %+v, want only the QoS 1 message", shared)
	}
	if in, _ := s.Pending(); in != 1 {
		t.Fatalf("inflight %d, want the QoS 2 message kept", in)
	}
}
