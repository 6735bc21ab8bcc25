package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestMessageBorrowOwn: Borrow points into the PUBLISH, keeps only pass-through properties
// and turns the expiry interval into a deadline; Own copies into one buffer whose parts
// cannot grow into each other.
func TestMessageBorrowOwn(t *testing.T) {
	p := &packet.Publish{Topic: []byte("a/b"), Payload: []byte("payload"), QoS: 2, Retain: true, Props: packet.Properties{
		ContentType:     []byte("ct"),
		MessageExpiry:   packet.Some[uint32](5),
		TopicAlias:      packet.Some[uint16](1),
		SubscriptionIDs: []uint32{7},
	}}
	scratch := make([]byte, 0, 64)
	var m Message
	props := m.Borrow(p, p.Topic, 9, t0, scratch)
	if !m.Borrowed() || &m.Topic()[0] != &p.Topic[0] || &m.Payload()[0] != &p.Payload[0] {
		t.Fatal("Borrow copied")
	}
	if &props[:1][0] != &scratch[:1][0] {
		t.Error("Borrow did not reuse the scratch buffer")
	}
	want := (&packet.Properties{ContentType: []byte("ct")}).AppendRaw(nil, packet.PUBLISH)
	if string(m.Props()) != string(want) {
		t.Errorf("props % x, want only the content type % x", m.Props(), want)
	}
	if m.Expiry != at(5*time.Second) || m.Origin != 9 || m.QoS != 2 || !m.Retain {
		t.Errorf("Expiry %d Origin %d QoS %d Retain %v", m.Expiry, m.Origin, m.QoS, m.Retain)
	}

	o := m.Own()
	if o == &m || o.Borrowed() || o.Own() != o {
		t.Fatal("Own did not return an owned copy, or copied an owned message")
	}
	copy(p.Topic, "XXX")
	copy(p.Payload, "XXXXXXX")
	copy(scratch[:len(props)], make([]byte, len(props)))
	if string(o.Topic()) != "a/b" || string(o.Payload()) != "payload" || string(o.Props()) != string(want) {
		t.Errorf("owned copy changed with the source: %q %q % x", o.Topic(), o.Payload(), o.Props())
	}
	if cap(o.Topic()) != len(o.Topic()) || cap(o.Payload()) != len(o.Payload()) {
		t.Error("appending to the topic or payload would overwrite the next part")
	}
	if o.Expiry != m.Expiry || o.Origin != 9 || o.QoS != 2 || !o.Retain {
		t.Error("Own lost a field")
	}
	if o.Size() != 3+7+len(want)+96 {
		t.Errorf("Size() = %d", o.Size())
	}
}

func TestMessageNoExpiry(t *testing.T) {
	m := NewLocalMessage("t", []byte("x"), 1, false)
	if m.Expiry != 0 || m.Borrowed() || len(m.Props()) != 0 {
		t.Errorf("local message: Expiry %d borrowed %v", m.Expiry, m.Borrowed())
	}
	if secs, has, alive := m.Remaining(at(100 * 365 * 24 * time.Hour)); secs != 0 || has || !alive {
		t.Errorf("Remaining = %d, %v, %v; want 0, false, true", secs, has, alive)
	}
}

func TestMessageRemaining(t *testing.T) {
	m := pub{topic: "t", expiry: 3}.owned()
	for _, tc := range []struct {
		elapsed time.Duration
		secs    uint32
		alive   bool
	}{
		{-time.Second, 4, true},
		{0, 3, true},
		{time.Nanosecond, 3, true},
		{time.Second, 2, true},
		{3*time.Second - time.Nanosecond, 1, true},
		{3 * time.Second, 0, false},
		{4 * time.Second, 0, false},
	} {
		t.Run(fmt.Sprint(tc.elapsed), func(t *testing.T) {
			secs, has, alive := m.Remaining(at(tc.elapsed))
			if secs != tc.secs || !has || alive != tc.alive {
				t.Errorf("Remaining = %d, %v, %v; want %d, true, %v", secs, has, alive, tc.secs, tc.alive)
			}
		})
	}
}

func TestMessageWithRetain(t *testing.T) {
	m := pub{topic: "t", payload: "x", retain: true}.owned()
	if m.WithRetain(true) != m {
		t.Error("WithRetain(same) copied")
	}
	c := m.WithRetain(false)
	if c == m || c.Retain || !m.Retain || &c.Payload()[0] != &m.Payload()[0] {
		t.Error("WithRetain(other): want a copy sharing the buffer")
	}
	b, _ := pub{topic: "t", payload: "x"}.borrowed()
	if o := b.WithRetain(false); o.Borrowed() || o == b {
		t.Error("WithRetain of a borrowed message did not own it")
	}
}
