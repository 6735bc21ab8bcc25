package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// t0 is the tests' clock origin; messages are published at t0 unless a test says otherwise.
var t0 = time.Unix(1_700_000_000, 0)

// at is t0 plus d, in Unix nanoseconds as the session takes time.
func at(d time.Duration) int64 { return t0.Add(d).UnixNano() }

// fakeConn is a Conn that records what the session writes. Buffered reports buffered, which
// a test sets to play a slow consumer; notices counts the drain notices asked for and not
// yet answered (see drained).
type fakeConn struct {
	buf      []byte
	writes   int
	buffered int
	notices  int
	shutdown bool
	closed   bool
}

func (c *fakeConn) Write(b []byte) (int, error) {
	c.buf = append(c.buf, b...)
	c.writes++
	return len(b), nil
}
func (c *fakeConn) Buffered() int  { return c.buffered }
func (c *fakeConn) NotifyDrained() { c.notices = 1 } // requests before the notice are one
func (c *fakeConn) Shutdown()      { c.shutdown = true }
func (c *fakeConn) Close() error   { c.closed = true; return nil }
func (c *fakeConn) take() []byte   { b := c.buf; c.buf = nil; return b }

// drained plays the connection draining: nothing is buffered any more, and if a notice
// was asked for the session is pumped, as the broker does on it. It reports whether one
// was.
func (c *fakeConn) drained(s *Session, now int64) bool {
	c.buffered = 0
	if c.notices == 0 {
		return false
	}
	c.notices = 0
	if dirtied, _ := s.Pump(c, now); dirtied {
		s.Flush()
	}
	return true
}
func (c *fakeConn) String() string { return fmt.Sprintf("%x", c.buf) }

// packets decodes and consumes everything written so far, failing the test on bytes that
// are not a sequence of complete, valid packets of version v.
func (c *fakeConn) packets(t testing.TB, v packet.Version) []packet.Packet {
	t.Helper()
	return decodeAll(t, c.take(), v)
}

// lines describes and consumes everything written so far (see describe).
func (c *fakeConn) lines(t testing.TB, v packet.Version) []string {
	t.Helper()
	var out []string
	for _, p := range c.packets(t, v) {
		out = append(out, describe(p))
	}
	return out
}

func decodeAll(t testing.TB, b []byte, v packet.Version) []packet.Packet {
	t.Helper()
	var out []packet.Packet
	for len(b) > 0 {
		h, n, err := packet.ParseHeader(b, v)
		if err != nil || n == 0 {
			t.Fatalf("bad fixed header at % x: n %d, %v", b, n, err)
		}
		if h.Size() > len(b) {
			t.Fatalf("truncated %v: need %d bytes, have %d", h.Type, h.Size(), len(b))
		}
		p, err := packet.Decode(h, b[n:h.Size()], v)
		if err != nil {
			t.Fatalf("decode %v % x: %v", h.Type, b[:h.Size()], err)
		}
		out = append(out, p)
		b = b[h.Size():]
	}
	return out
}

// describe is a one-line summary of p that tests compare: the packet type, then for a
// PUBLISH its topic, QoS, packet id, flags and per-recipient properties, and for the acks
// their packet id and a reason code other than success.
func describe(p packet.Packet) string {
	var b strings.Builder
	b.WriteString(p.Type().String())
	switch p := p.(type) {
	case *packet.Publish:
		fmt.Fprintf(&b, " %q q%d", p.Topic, p.QoS)
		if p.QoS > 0 {
			fmt.Fprintf(&b, " id%d", p.PacketID)
		}
		if p.Dup {
			b.WriteString(" dup")
		}
		if p.Retain {
			b.WriteString(" retain")
		}
		if a := p.Props.TopicAlias; a.Set {
			fmt.Fprintf(&b, " alias=%d", a.V)
		}
		if e := p.Props.MessageExpiry; e.Set {
			fmt.Fprintf(&b, " exp=%d", e.V)
		}
		if len(p.Props.SubscriptionIDs) > 0 {
			fmt.Fprintf(&b, " subs=%v", p.Props.SubscriptionIDs)
		}
		fmt.Fprintf(&b, " %q", p.Payload)
	case *packet.Ack:
		fmt.Fprintf(&b, " id%d", p.PacketID)
		if p.Code != packet.Success {
			fmt.Fprintf(&b, " rc=%#x", byte(p.Code))
		}
	case *packet.Disconnect:
		fmt.Fprintf(&b, " rc=%#x", byte(p.Code))
	}
	return b.String()
}

// testLimits are roomy limits; tests narrow the one they exercise.
func testLimits() *Limits {
	return &Limits{ReceiveMaximum: 10, TopicAliasMaximum: 10, QueueMessages: 100, QueueBytes: 1 << 20}
}

// online returns a session of protocol version v attached to a fresh fakeConn.
func online(t testing.TB, lim *Limits, info ConnectInfo) (*Session, *fakeConn) {
	t.Helper()
	if lim == nil {
		lim = testLimits()
	}
	if info.Version == 0 {
		info.Version = packet.V5
	}
	s := New(1, "client", lim)
	c := &fakeConn{}
	s.Attach(c, info, nil, at(0))
	return s, c
}

// reconnect detaches c and attaches a new connection with info, as a client coming back
// to its persistent session does (Attach resumes it: resumeLocked), and flushes what
// Attach sent.
func reconnect(t testing.TB, s *Session, c *fakeConn, info ConnectInfo, now int64) *fakeConn {
	t.Helper()
	nc, _ := reconnectDrops(t, s, c, info, now)
	return nc
}

// reconnectDrops is reconnect that also returns what Attach dropped.
func reconnectDrops(t testing.TB, s *Session, c *fakeConn, info ConnectInfo, now int64) (*fakeConn, Drops) {
	t.Helper()
	if _, ok := s.Detach(c); !ok {
		t.Fatal("Detach: connection was not attached")
	}
	if info.Version == 0 {
		info.Version = packet.V5
	}
	nc := &fakeConn{}
	_, dropped := s.Attach(nc, info, nil, now)
	s.Flush()
	return nc, dropped
}

// pub is a PUBLISH as a client sends it, published at t0.
type pub struct {
	topic, payload string
	qos            uint8
	retain         bool
	expiry         uint32 // message expiry interval, 0 none
	props          packet.Properties
}

func (p pub) packet() *packet.Publish {
	pk := &packet.Publish{Topic: []byte(p.topic), Payload: []byte(p.payload), QoS: p.qos, Retain: p.retain, Props: p.props}
	if p.expiry != 0 {
		pk.Props.MessageExpiry = packet.Some(p.expiry)
	}
	return pk
}

// owned is the owned message of p.
func (p pub) owned() *Message {
	pk := p.packet()
	return NewMessage(pk, pk.Topic, 0, t0)
}

// borrowed is a borrowed message pointing into a buffer of its own, returned so that a
// test can scribble over it.
func (p pub) borrowed() (*Message, []byte) {
	buf := []byte(p.topic + p.payload)
	pk := p.packet()
	pk.Topic, pk.Payload = buf[:len(p.topic)], buf[len(p.topic):]
	var m Message
	m.Borrow(pk, pk.Topic, 0, t0, nil)
	return &m, buf
}

func msg(topic, payload string) *Message { return pub{topic: topic, payload: payload}.owned() }

// deliver delivers d and fails the test unless the outcome is want.
func deliver(t testing.TB, s *Session, d Delivery, now int64, want Drop) {
	t.Helper()
	if _, drop := s.Deliver(d, now); drop != want {
		t.Fatalf("Deliver(%q q%d): drop %q, want %q", d.Msg.Topic(), d.QoS, drop, want)
	}
}

// ack sends the client's acknowledgement of type typ for pid.
func ack(s *Session, typ packet.Type, pid uint16, code packet.ReasonCode) Drops {
	_, dropped := s.Ack(&packet.Ack{PacketType: typ, PacketID: pid, Code: code}, at(0))
	s.Flush()
	return dropped
}

func equalLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// counter is a Counter for tests.
type counter uint64

func (c *counter) Add(n uint64) { *c += counter(n) }
