package session

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

var versions = []packet.Version{packet.V311, packet.V5}

func TestDeliverQoS(t *testing.T) {
	for _, v := range versions {
		for _, tc := range []struct {
			name   string
			qos    uint8
			retain bool
			want   string
		}{
			{"qos0", 0, false, `PUBLISH "a/b" q0 "hi"`},
			{"qos0/retain", 0, true, `PUBLISH "a/b" q0 retain "hi"`},
			{"qos1", 1, false, `PUBLISH "a/b" q1 id1 "hi"`},
			{"qos2/retain", 2, true, `PUBLISH "a/b" q2 id1 retain "hi"`},
		} {
			t.Run(fmt.Sprintf("v%v/%s", v, tc.name), func(t *testing.T) {
				s, c := online(t, nil, ConnectInfo{Version: v})
				// The message was published retained; what the recipient sees is the
				// delivery's retain flag.
				m := pub{topic: "a/b", payload: "hi", qos: 2, retain: true}.owned()
				dirtied, drop := s.Deliver(Delivery{Msg: m, QoS: tc.qos, Retain: tc.retain}, at(0))
				if !dirtied || drop != Delivered {
					t.Fatalf("Deliver: dirtied %v drop %q", dirtied, drop)
				}
				if len(c.buf) != 0 {
					t.Fatal("Deliver wrote before Flush")
				}
				s.Flush()
				equalLines(t, "written", c.lines(t, v), []string{tc.want})
				inflight, queued := s.Pending()
				if want := min(int(tc.qos), 1); inflight != want || queued != 0 {
					t.Errorf("Pending() = %d, %d; want %d, 0", inflight, queued, want)
				}
				if tc.qos == 0 && s.fl != nil {
					t.Error("QoS 0 delivery allocated traffic state")
				}
			})
		}
	}
}

// TestDeliverBatch: deliveries between two flushes reach the connection in one write, in
// order, and only the first one dirties the session.
func TestDeliverBatch(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{})
	var dirtied []bool
	for i, qos := range []uint8{1, 0, 2, 1} {
		d, _ := s.Deliver(Delivery{Msg: msg("t", fmt.Sprint(i)), QoS: qos}, at(0))
		dirtied = append(dirtied, d)
	}
	if fmt.Sprint(dirtied) != "[true false false false]" {
		t.Errorf("dirtied = %v, want only the first", dirtied)
	}
	s.Flush()
	s.Flush() // nothing pending: no write
	if c.writes != 1 {
		t.Errorf("%d writes, want 1", c.writes)
	}
	equalLines(t, "written", c.lines(t, packet.V5), []string{
		`PUBLISH "t" q1 id1 "0"`,
		`PUBLISH "t" q0 "1"`,
		`PUBLISH "t" q2 id2 "2"`,
		`PUBLISH "t" q1 id3 "3"`,
	})
	if d, _ := s.Deliver(Delivery{Msg: msg("t", "4")}, at(0)); !d {
		t.Error("first Deliver after Flush did not dirty the session")
	}
}

// TestDeliverWindow: QoS 1 and 2 messages beyond the client's receive window wait in the
// queue, in order, and move into the window as acknowledgements free it.
func TestDeliverWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recvMax uint16 // the client's; 0 takes the broker's ReceiveMaximum (3)
		window  int
	}{
		{"client=2", 2, 2},
		{"client=unset", 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits()
			lim.ReceiveMaximum = 3
			s, c := online(t, lim, ConnectInfo{ClientRecvMax: tc.recvMax})
			for i := range 5 {
				d, drop := s.Deliver(Delivery{Msg: msg("t", fmt.Sprint(i)), QoS: 1 + uint8(i%2)}, at(0))
				if drop != Delivered {
					t.Fatalf("message %d: %q", i, drop)
				}
				if d != (i == 0) {
					t.Errorf("message %d: dirtied %v", i, d)
				}
			}
			s.Flush()
			if got := len(c.packets(t, packet.V5)); got != tc.window {
				t.Fatalf("%d PUBLISH written, want the window of %d", got, tc.window)
			}
			if in, q := s.Pending(); in != tc.window || q != 5-tc.window {
				t.Fatalf("Pending() = %d, %d; want %d, %d", in, q, tc.window, 5-tc.window)
			}
			// Acknowledge the first message (QoS 1): one slot frees, the next queued
			// message takes it with the next packet id.
			dirtied, dropped := s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
			if !dirtied || dropped != (Drops{}) {
				t.Fatalf("Ack: dirtied %v dropped %v", dirtied, dropped)
			}
			s.Flush()
			n := tc.window
			equalLines(t, "after PUBACK", c.lines(t, packet.V5), []string{
				fmt.Sprintf(`PUBLISH "t" q%d id%d "%d"`, 1+n%2, n+1, n),
			})
			// A PUBREC does not free the slot; its PUBCOMP does.
			ack(s, packet.PUBREC, 2, packet.Success)
			equalLines(t, "after PUBREC", c.lines(t, packet.V5), []string{"PUBREL id2"})
			ack(s, packet.PUBCOMP, 2, packet.Success)
			equalLines(t, "after PUBCOMP", c.lines(t, packet.V5), []string{
				fmt.Sprintf(`PUBLISH "t" q%d id%d "%d"`, 1+(n+1)%2, n+2, n+1),
			})
		})
	}
}

// TestDeliverQueueBounds: the queue holds QoS 1 and 2 messages up to QueueMessages and
// QueueBytes, whether the client is offline or its window is full; beyond, DropQueueFull.
func TestDeliverQueueBounds(t *testing.T) {
	size := msg("t", "x").Size()
	for _, tc := range []struct {
		name          string
		msgs, bytes   int
		offline       bool
		wantDelivered int
	}{
		{"messages=3/offline", 3, 1 << 20, true, 3},
		{"messages=3/window-full", 3, 1 << 20, false, 3 + 1},
		{"bytes=3msgs/offline", 100, 3 * size, true, 3},
		{"bytes=3msgs-1/offline", 100, 3*size - 1, true, 2},
		{"bytes=3msgs/window-full", 100, 3 * size, false, 3 + 1},
		{"messages=0/offline", 0, 1 << 20, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits()
			lim.QueueMessages, lim.QueueBytes = tc.msgs, tc.bytes
			s, c := online(t, lim, ConnectInfo{ClientRecvMax: 1})
			if tc.offline {
				s.Detach(c)
			}
			var got []Drop
			for range 6 {
				_, drop := s.Deliver(Delivery{Msg: msg("t", "x"), QoS: 1}, at(0))
				got = append(got, drop)
			}
			for i, drop := range got {
				want := Delivered
				if i >= tc.wantDelivered {
					want = DropQueueFull
				}
				if drop != want {
					t.Errorf("message %d: drop %q, want %q (all: %v)", i, drop, want, got)
				}
			}
			if tc.wantDelivered == 0 && s.fl != nil {
				t.Error("traffic state kept with nothing in it")
			}
		})
	}
}

// TestDeliverQueueBytesAccounting: the queue's byte count follows what enters and leaves
// it, so that room freed by a pump is usable again.
func TestDeliverQueueBytesAccounting(t *testing.T) {
	lim := testLimits()
	lim.QueueBytes = 2 * msg("t", "x").Size()
	s, _ := online(t, lim, ConnectInfo{ClientRecvMax: 1})
	for range 3 {
		deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered) // 1 inflight, 2 queued
	}
	deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), DropQueueFull)
	ack(s, packet.PUBACK, 1, packet.Success) // one moves into the window
	deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1}, at(0), DropQueueFull)
	if s.fl.queueBytes != lim.QueueBytes {
		t.Errorf("queueBytes = %d, want %d", s.fl.queueBytes, lim.QueueBytes)
	}
}

// TestDeliverQoS0Shedding: QoS 0 is never queued: it is dropped while the client is
// offline or while more than SlowBytes wait to be sent to it, and under memory pressure
// while more than SlowBytes/16 wait. QoS 1 is not shed: it is queued then.
func TestDeliverQoS0Shedding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slow     int
		buffered int
		offline  bool
		qos      uint8
		want     Drop
		queued   bool
		pressed  bool
	}{
		{"offline", 100, 0, true, 0, DropOffline, false, false},
		{"buffered>slow", 100, 101, false, 0, DropSlowConsumer, false, false},
		{"buffered=slow", 100, 100, false, 0, Delivered, false, false},
		{"slow=0/buffered=1MiB", 0, 1 << 20, false, 0, Delivered, false, false},
		{"qos1/buffered>slow", 100, 101, false, 1, Delivered, true, false},
		{"qos1/offline", 100, 0, true, 1, Delivered, true, false},
		{"pressed/buffered>slow/16", 1600, 101, false, 0, DropPressure, false, true},
		{"pressed/buffered=slow/16", 1600, 100, false, 0, Delivered, false, true},
		{"pressed/buffered>slow", 1600, 1601, false, 0, DropSlowConsumer, false, true},
		{"pressed/qos1/buffered>slow/16", 1600, 101, false, 1, Delivered, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits()
			lim.SlowBytes = tc.slow
			lim.Pressed = func() bool { return tc.pressed }
			s, c := online(t, lim, ConnectInfo{})
			c.buffered = tc.buffered
			if tc.offline {
				s.Detach(c)
			}
			dirtied, drop := s.Deliver(Delivery{Msg: msg("t", "x"), QoS: tc.qos}, at(0))
			if drop != tc.want {
				t.Fatalf("drop %q, want %q", drop, tc.want)
			}
			if dirtied != (tc.want == Delivered && !tc.queued) {
				t.Errorf("dirtied %v", dirtied)
			}
			if _, queued := s.Pending(); (queued > 0) != tc.queued {
				t.Errorf("%d queued", queued)
			}
			s.Flush()
			if (tc.want != Delivered || tc.queued) && len(c.buf) > 0 {
				t.Errorf("a dropped or queued message was written: %v", c)
			}
		})
	}
}

// TestDeliverQoS0PendingUnderPressure: under memory pressure the bytes a session has
// encoded and not flushed yet count towards the QoS 0 threshold, so that one round's
// fan-out cannot pile up in every subscriber's pending buffer; without pressure they do
// not, and the whole burst is written.
func TestDeliverQoS0PendingUnderPressure(t *testing.T) {
	for _, pressed := range []bool{false, true} {
		t.Run(fmt.Sprint("pressed=", pressed), func(t *testing.T) {
			lim := testLimits()
			lim.SlowBytes = 16 * 100 // 100 bytes under pressure
			lim.Pressed = func() bool { return pressed }
			s, _ := online(t, lim, ConnectInfo{})
			delivered := 0
			for range 10 {
				// About 40 bytes each: three fit in 100.
				_, drop := s.Deliver(Delivery{Msg: msg("t", strings.Repeat("x", 30)), QoS: 0}, at(0))
				switch drop {
				case Delivered:
					delivered++
				case DropPressure:
				default:
					t.Fatalf("drop %q", drop)
				}
			}
			want := 10
			if pressed {
				want = 3
			}
			if delivered != want {
				t.Fatalf("%d of 10 delivered in one round, want %d", delivered, want)
			}
		})
	}
}

// TestDeliverExpiry: the message expiry interval a client sees is what is left of it,
// rounded up [MQTT-3.3.2-6]; an expired message is not sent.
func TestDeliverExpiry(t *testing.T) {
	for _, tc := range []struct {
		elapsed time.Duration
		want    string // the PUBLISH's expiry, "" when dropped
	}{
		{0, "exp=10"},
		{500 * time.Millisecond, "exp=10"},
		{time.Second, "exp=9"},
		{9*time.Second + time.Nanosecond, "exp=1"},
		{10*time.Second - time.Nanosecond, "exp=1"},
		{10 * time.Second, ""},
		{time.Hour, ""},
	} {
		for _, qos := range []uint8{0, 1} {
			t.Run(fmt.Sprintf("elapsed=%v/q%d", tc.elapsed, qos), func(t *testing.T) {
				s, c := online(t, nil, ConnectInfo{})
				m := pub{topic: "t", payload: "x", expiry: 10}.owned()
				_, drop := s.Deliver(Delivery{Msg: m, QoS: qos}, at(tc.elapsed))
				s.Flush()
				if tc.want == "" {
					if drop != DropExpired || len(c.buf) > 0 {
						t.Fatalf("drop %q, written %v; want DropExpired, nothing", drop, c)
					}
					if in, q := s.Pending(); in+q != 0 || s.fl != nil {
						t.Errorf("expired message kept: Pending() = %d, %d", in, q)
					}
					return
				}
				id := ""
				if qos > 0 {
					id = " id1"
				}
				equalLines(t, "written", c.lines(t, packet.V5),
					[]string{fmt.Sprintf(`PUBLISH "t" q%d%s %s "x"`, qos, id, tc.want)})
			})
		}
	}
}

// TestDeliverExpiryWhileQueued: a message that expires in the queue is dropped when its
// turn comes, and the queue moves on to the next.
func TestDeliverExpiryWhileQueued(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientRecvMax: 1})
	deliver(t, s, Delivery{Msg: msg("t", "first"), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: pub{topic: "t", payload: "short", expiry: 5}.owned(), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: pub{topic: "t", payload: "long", expiry: 60}.owned(), QoS: 2}, at(0), Delivered)
	s.Flush()
	c.take()
	_, dropped := s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(20*time.Second))
	s.Flush()
	if dropped != (Drops{DropExpired: 1}) {
		t.Errorf("dropped %q, want expired=1", dropped)
	}
	// The expired message took packet id 2 before it was found expired; any free id will do.
	equalLines(t, "after PUBACK", c.lines(t, packet.V5), []string{`PUBLISH "t" q2 id3 exp=40 "long"`})
}

// TestDeliverTooLarge: a PUBLISH above the client's Maximum Packet Size is discarded as if
// delivered [MQTT-3.1.2-25], and takes no window slot.
func TestDeliverTooLarge(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slack int // the client's maximum less the PUBLISH's size; 1<<20: no maximum
		want  Drop
	}{
		{"max=size", 0, Delivered},
		{"max=size-1", -1, DropTooLarge},
		{"max=unset", 1 << 20, Delivered},
	} {
		for _, qos := range []uint8{0, 1} {
			t.Run(fmt.Sprintf("%s/q%d", tc.name, qos), func(t *testing.T) {
				p := packet.Publish{Topic: []byte("t"), Payload: []byte("12345"), QoS: qos}
				if qos > 0 {
					p.PacketID = 1
				}
				size := p.Size(packet.V5)
				max := uint32(size + tc.slack)
				if tc.slack == 1<<20 {
					max = 0
				}
				s, c := online(t, nil, ConnectInfo{ClientMaxPacket: max})
				dirtied, drop := s.Deliver(Delivery{Msg: msg("t", "12345"), QoS: qos}, at(0))
				if drop != tc.want {
					t.Fatalf("drop %q, want %q", drop, tc.want)
				}
				s.Flush()
				if tc.want != Delivered {
					if dirtied || len(c.buf) > 0 {
						t.Errorf("dirtied %v, written %v", dirtied, c)
					}
					if in, q := s.Pending(); in+q != 0 || s.fl != nil {
						t.Errorf("dropped message kept: Pending() = %d, %d", in, q)
					}
					return
				}
				if len(c.buf) != size {
					t.Errorf("wrote %d bytes, want %d", len(c.buf), size)
				}
			})
		}
	}
}

// TestDeliverTooLargeWhileQueued: the size check applies when a queued message is sent.
func TestDeliverTooLargeWhileQueued(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientRecvMax: 1, ClientMaxPacket: 20})
	deliver(t, s, Delivery{Msg: msg("t", "a"), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("t", "far too large for the client"), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("t", "b"), QoS: 1}, at(0), Delivered)
	s.Flush()
	c.take()
	if dropped := ack(s, packet.PUBACK, 1, packet.Success); dropped != (Drops{DropTooLarge: 1}) {
		t.Errorf("dropped %q, want too_large=1", dropped)
	}
	// The dropped message took packet id 2; any free id will do.
	equalLines(t, "after PUBACK", c.lines(t, packet.V5), []string{`PUBLISH "t" q1 id3 "b"`})
}

// TestDeliverSubscriptionIDs: a 5.0 PUBLISH carries every subscription identifier that
// matched [MQTT-3.3.4-3]; 3.1.1 has none.
func TestDeliverSubscriptionIDs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first uint32
		more  []uint32
		want  string
	}{
		{"none", 0, nil, ""},
		{"one", 7, nil, " subs=[7]"},
		{"three", 1, []uint32{2, 268_435_455}, " subs=[1 2 268435455]"},
		{"six", 1, []uint32{2, 3, 4, 5, 6}, " subs=[1 2 3 4 5 6]"},
	} {
		for _, v := range versions {
			t.Run(fmt.Sprintf("%s/v%v", tc.name, v), func(t *testing.T) {
				s, c := online(t, nil, ConnectInfo{Version: v})
				deliver(t, s, Delivery{Msg: msg("t", "x"), QoS: 1, SubID: tc.first, More: tc.more}, at(0), Delivered)
				s.Flush()
				want := tc.want
				if v != packet.V5 {
					want = ""
				}
				equalLines(t, "written", c.lines(t, v), []string{`PUBLISH "t" q1 id1` + want + ` "x"`})
			})
		}
	}
}

// TestDeliverTopicAliases: with a client Topic Alias Maximum, the first topics sent get
// aliases, later messages to them carry the alias and an empty topic, topics beyond the
// maximum go without, and a new connection starts over (spec 3.3.2.3.4).
func TestDeliverTopicAliases(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientAliasMax: 2})
	for _, topic := range []string{"a", "b", "a", "c", "b", "c"} {
		deliver(t, s, Delivery{Msg: msg(topic, "x"), QoS: 0}, at(0), Delivered)
	}
	deliver(t, s, Delivery{Msg: msg("a", "y"), QoS: 1}, at(0), Delivered)
	s.Flush()
	equalLines(t, "first connection", c.lines(t, packet.V5), []string{
		`PUBLISH "a" q0 alias=1 "x"`,
		`PUBLISH "b" q0 alias=2 "x"`,
		`PUBLISH "" q0 alias=1 "x"`,
		`PUBLISH "c" q0 "x"`,
		`PUBLISH "" q0 alias=2 "x"`,
		`PUBLISH "c" q0 "x"`,
		`PUBLISH "" q1 id1 alias=1 "y"`,
	})
	// The unacknowledged QoS 1 message goes again on the new connection, which knows no
	// alias yet.
	c = reconnect(t, s, c, ConnectInfo{ClientAliasMax: 2}, at(0))
	deliver(t, s, Delivery{Msg: msg("b", "z"), QoS: 0}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("a", "z"), QoS: 0}, at(0), Delivered)
	s.Flush()
	equalLines(t, "second connection", c.lines(t, packet.V5), []string{
		`PUBLISH "a" q1 id1 dup alias=1 "y"`,
		`PUBLISH "b" q0 alias=2 "z"`,
		`PUBLISH "" q0 alias=1 "z"`,
	})
	// A client that allows no aliases gets none.
	c = reconnect(t, s, c, ConnectInfo{}, at(0))
	deliver(t, s, Delivery{Msg: msg("a", "w"), QoS: 0}, at(0), Delivered)
	s.Flush()
	equalLines(t, "third connection", c.lines(t, packet.V5), []string{
		`PUBLISH "a" q1 id1 dup "y"`,
		`PUBLISH "a" q0 "w"`,
	})
}

// TestDeliverTopicAliasV311: aliases are 5.0 only, whatever ConnectInfo says.
func TestDeliverTopicAliasV311(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{Version: packet.V311, ClientAliasMax: 5})
	deliver(t, s, Delivery{Msg: msg("a", "x")}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("a", "x")}, at(0), Delivered)
	s.Flush()
	equalLines(t, "written", c.lines(t, packet.V311), []string{`PUBLISH "a" q0 "x"`, `PUBLISH "a" q0 "x"`})
}

// TestDeliverTopicAliasNotSent: an alias is only known to the client once a PUBLISH
// assigning it was written; a dropped one must not leave it assigned.
func TestDeliverTopicAliasNotSent(t *testing.T) {
	s, c := online(t, nil, ConnectInfo{ClientAliasMax: 2, ClientMaxPacket: 30})
	deliver(t, s, Delivery{Msg: msg("a", "a payload too large for the client")}, at(0), DropTooLarge)
	deliver(t, s, Delivery{Msg: msg("a", "small")}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("a", "small")}, at(0), Delivered)
	s.Flush()
	equalLines(t, "written", c.lines(t, packet.V5), []string{
		`PUBLISH "a" q0 alias=1 "small"`,
		`PUBLISH "" q0 alias=1 "small"`,
	})

	// A PUBLISH that fits only without the 3 bytes of a new alias goes without one.
	exact := (&packet.Publish{Topic: []byte("abcd"), Payload: []byte("exactly")}).Size(packet.V5)
	s, c = online(t, nil, ConnectInfo{ClientAliasMax: 2, ClientMaxPacket: uint32(exact)})
	deliver(t, s, Delivery{Msg: msg("abcd", "exactly")}, at(0), Delivered)
	if s.fl != nil {
		t.Error("traffic state kept with no alias assigned")
	}
	deliver(t, s, Delivery{Msg: msg("abcd", "ok")}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: msg("abcd", "exactly")}, at(0), Delivered) // fits behind the alias
	s.Flush()
	equalLines(t, "written", c.lines(t, packet.V5), []string{
		`PUBLISH "abcd" q0 "exactly"`,
		`PUBLISH "abcd" q0 alias=1 "ok"`,
		`PUBLISH "" q0 alias=1 "exactly"`,
	})
}

// TestDeliverPassThroughProps: a 5.0 PUBLISH carries the publisher's pass-through
// properties next to the per-recipient ones; the publisher's topic alias is not forwarded.
func TestDeliverPassThroughProps(t *testing.T) {
	props := packet.Properties{
		PayloadFormat:   packet.Some[uint8](1),
		ContentType:     []byte("text/plain"),
		ResponseTopic:   []byte("reply/to"),
		CorrelationData: []byte{1, 2, 3},
		User:            []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}, {Key: []byte("k"), Value: []byte("w")}},
		TopicAlias:      packet.Some[uint16](3),
	}
	m := pub{topic: "t", payload: "x", expiry: 30, props: props}.owned()
	s, c := online(t, nil, ConnectInfo{})
	deliver(t, s, Delivery{Msg: m, QoS: 1, SubID: 4}, at(10*time.Second), Delivered)
	s.Flush()
	ps := c.packets(t, packet.V5)
	if len(ps) != 1 {
		t.Fatalf("%d packets written", len(ps))
	}
	got := ps[0].(*packet.Publish).Props
	want := props
	want.TopicAlias = packet.Opt[uint16]{}
	want.MessageExpiry = packet.Some[uint32](20)
	want.SubscriptionIDs = []uint32{4}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("properties:\ngot  %+v\nwant %+v", got, want)
	}
}

// TestDeliverEncoding pins the bytes of a PUBLISH in both versions: 3.1.1 has no property
// section at all, whatever the message and delivery carry.
func TestDeliverEncoding(t *testing.T) {
	user := packet.Properties{User: []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}}
	for _, tc := range []struct {
		name string
		v    packet.Version
		p    pub
		d    Delivery
		want []byte
	}{
		{"v311/q0", packet.V311, pub{topic: "a/b", payload: "hi"}, Delivery{},
			[]byte{0x30, 7, 0, 3, 'a', '/', 'b', 'h', 'i'}},
		{"v311/q1/retain/subid/expiry/user", packet.V311, pub{topic: "a/b", payload: "hi", expiry: 9, props: user},
			Delivery{QoS: 1, Retain: true, SubID: 3},
			[]byte{0x33, 9, 0, 3, 'a', '/', 'b', 0, 1, 'h', 'i'}},
		{"v5/q0", packet.V5, pub{topic: "a/b", payload: "hi"}, Delivery{},
			[]byte{0x30, 8, 0, 3, 'a', '/', 'b', 0, 'h', 'i'}},
		{"v5/q2/subid/expiry/user", packet.V5, pub{topic: "a/b", payload: "hi", expiry: 9, props: user},
			Delivery{QoS: 2, SubID: 3},
			[]byte{0x34, 24, 0, 3, 'a', '/', 'b', 0, 1,
				14,               // property length
				0x02, 0, 0, 0, 9, // message expiry 9
				0x0b, 3, // subscription identifier 3
				0x26, 0, 1, 'k', 0, 1, 'v', // user property k=v
				'h', 'i'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := online(t, nil, ConnectInfo{Version: tc.v})
			d := tc.d
			d.Msg = tc.p.owned()
			deliver(t, s, d, at(0), Delivered)
			s.Flush()
			if !bytes.Equal(c.buf, tc.want) {
				t.Errorf("wrote\n\t% x\nwant\n\t% x", c.buf, tc.want)
			}
		})
	}
}

// TestDeliverBorrowed: a borrowed message is encoded at once at QoS 0 and copied at QoS 1
// and 2, so that the publisher's buffer may be reused as soon as Deliver returns.
func TestDeliverBorrowed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		qos     uint8
		offline bool
	}{
		{"q0", 0, false},
		{"q1/inflight", 1, false},
		{"q2/inflight", 2, false},
		{"q1/queued-offline", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pub{topic: "a/b", payload: "payload", props: packet.Properties{ContentType: []byte("ct")}}
			m, buf := p.borrowed()
			props := m.Props()
			s, c := online(t, nil, ConnectInfo{})
			if tc.offline {
				s.Detach(c)
			}
			deliver(t, s, Delivery{Msg: m, QoS: tc.qos}, at(0), Delivered)
			for i := range buf {
				buf[i] = 'X'
			}
			for i := range props {
				props[i] = 0xff
			}
			s.Flush()
			if tc.qos > 0 {
				// What a resume sends again is the message as published.
				if !tc.offline {
					s.Detach(c)
				}
				c = &fakeConn{}
				s.Attach(c, ConnectInfo{Version: packet.V5}, nil, at(0))
				s.Flush()
			}
			ps := c.packets(t, packet.V5)
			if len(ps) != 1 {
				t.Fatalf("%d packets written, want 1", len(ps))
			}
			got := ps[0].(*packet.Publish)
			if string(got.Topic) != "a/b" || string(got.Payload) != "payload" || string(got.Props.ContentType) != "ct" {
				t.Errorf("sent %s content type %q, want the message as published", describe(got), got.Props.ContentType)
			}
		})
	}
}

// TestDeliverQoS0AllocsNothing: the common path, a borrowed QoS 0 message to an online
// subscriber and the flush after it, allocates nothing once the buffer pool is warm.
func TestDeliverQoS0AllocsNothing(t *testing.T) {
	if testenv.Race {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, tc := range []struct {
		name string
		v    packet.Version
		d    Delivery
		info ConnectInfo
	}{
		{"v311", packet.V311, Delivery{}, ConnectInfo{}},
		{"v5", packet.V5, Delivery{Retain: true}, ConnectInfo{}},
		{"v5/subids=3", packet.V5, Delivery{SubID: 1, More: []uint32{2, 3}}, ConnectInfo{}},
		{"v5/alias", packet.V5, Delivery{}, ConnectInfo{ClientAliasMax: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.info.Version = tc.v
			lim := testLimits()
			lim.SlowBytes = 1 << 20
			var sent [3]counter
			var bytesSent counter
			lim.Sent = &[3]Counter{&sent[0], &sent[1], &sent[2]}
			lim.BytesSent = &bytesSent
			s := New(1, "c", lim)
			var c discardConn
			s.Attach(&c, tc.info, nil, at(0))
			m, _ := pub{topic: "sensors/1/temp", payload: "21.5", expiry: 60,
				props: packet.Properties{ContentType: []byte("text/plain")}}.borrowed()
			d := tc.d
			d.Msg = m
			run := func() {
				s.Deliver(d, at(0))
				s.Flush()
			}
			run() // warm the pool and assign the alias
			if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
				t.Errorf("Deliver+Flush allocated %.1f times", allocs)
			}
			if c.n == 0 || sent[0] == 0 || uint64(bytesSent) != uint64(c.n) {
				t.Errorf("wrote %d bytes, counted %d PUBLISH and %d bytes", c.n, sent[0], bytesSent)
			}
		})
	}
}

// discardConn counts what is written and keeps nothing, so that it allocates nothing.
type discardConn struct{ n int }

func (c *discardConn) Write(b []byte) (int, error) { c.n += len(b); return len(b), nil }
func (c *discardConn) Buffered() int               { return 0 }
func (c *discardConn) NotifyDrained()              {}
func (c *discardConn) Shutdown()                   {}
func (c *discardConn) Close() error                { return nil }

// TestDeliverSlowConsumer: QoS 1 messages are written while the connection is not backed
// up (what it buffers and what the session has pending, together, at most SlowBytes),
// and queued beyond, within the queue bounds (the newest refused as queue_full), even
// with room in the receive window; a drain notice is asked for, and each one pumps the
// next messages, until all have gone, in order, none lost.
func TestDeliverSlowConsumer(t *testing.T) {
	lim := testLimits()
	lim.SlowBytes = 1000
	lim.QueueMessages = 10
	s, c := online(t, lim, ConnectInfo{ClientRecvMax: 1000})
	payload := strings.Repeat("x", 300)
	sent := 0
	send := func(want Drop) {
		t.Helper()
		sent++
		deliver(t, s, Delivery{Msg: msg(fmt.Sprintf("t/%d", sent), payload), QoS: 1}, at(0), want)
	}
	var got []string
	read := func() int {
		ps := c.packets(t, packet.V5)
		for _, p := range ps {
			got = append(got, string(p.(*packet.Publish).Topic))
		}
		return len(ps)
	}

	// A burst: what fits in SlowBytes is written, the rest waits.
	for range 6 {
		send(Delivered)
	}
	s.Flush()
	if n := read(); n != 4 {
		t.Fatalf("%d PUBLISH written of a burst of 6 of 300 bytes with SlowBytes 1000, want 4", n)
	}
	if inflight, queued := s.Pending(); inflight != 4 || queued != 2 {
		t.Fatalf("%d in flight, %d queued; want 4, 2", inflight, queued)
	}
	if c.notices != 1 {
		t.Fatal("no drain notice asked for while messages wait beside room in the window")
	}

	// The connection backs up: nothing more is written; the queue fills, then refuses.
	c.buffered = 5000
	for range 8 {
		send(Delivered)
	}
	for range 3 {
		send(DropQueueFull)
	}
	s.Flush()
	if n := read(); n != 0 {
		t.Fatalf("%d PUBLISH written to a backed-up connection", n)
	}

	// Each drain writes the next SlowBytes' worth, until the queue is empty.
	for rounds := 0; c.drained(s, at(0)); rounds++ {
		if n := read(); n == 0 || n > 4 || rounds > 10 {
			t.Fatalf("drain %d: %d PUBLISH written", rounds, n)
		}
	}
	if inflight, queued := s.Pending(); inflight != 14 || queued != 0 {
		t.Fatalf("after the drains: %d in flight, %d queued; want 14, 0", inflight, queued)
	}
	for i, topic := range got {
		if want := fmt.Sprintf("t/%d", i+1); topic != want {
			t.Fatalf("PUBLISH %d is %s, want %s: %v", i, topic, want, got)
		}
	}
	if c.notices != 0 {
		t.Fatal("a drain notice asked for with nothing queued")
	}
}

// TestDeliverSlowConsumerWindow: a session whose window is full waits for
// acknowledgements, not for a drain notice; an acknowledgement that frees a slot while the
// connection is backed up writes nothing and asks for one.
func TestDeliverSlowConsumerWindow(t *testing.T) {
	lim := testLimits()
	lim.SlowBytes = 1000
	s, c := online(t, lim, ConnectInfo{ClientRecvMax: 2})
	for i := range 4 {
		deliver(t, s, Delivery{Msg: msg(fmt.Sprintf("t/%d", i+1), "x"), QoS: 1}, at(0), Delivered)
	}
	s.Flush()
	if ps := c.packets(t, packet.V5); len(ps) != 2 {
		t.Fatalf("%d PUBLISH written, want the window's 2", len(ps))
	}
	if c.notices != 0 {
		t.Fatal("a drain notice asked for while the window is full")
	}
	c.buffered = 5000
	ack(s, packet.PUBACK, 1, packet.Success)
	if ps := c.packets(t, packet.V5); len(ps) != 0 || c.notices != 1 {
		t.Fatalf("PUBACK on a backed-up connection: %d PUBLISH written, %d notices; want 0, 1", len(ps), c.notices)
	}
	if !c.drained(s, at(0)) {
		t.Fatal("no notice to deliver")
	}
	if lines := c.lines(t, packet.V5); len(lines) != 1 || lines[0] != `PUBLISH "t/3" q1 id3 "x"` {
		t.Fatalf("after the drain: %v, want t/3 with id 3", lines)
	}
}
