//go:build invariants

package session

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/invariants"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// mustPanic fails the test unless f panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		p := recover()
		if s, _ := p.(string); !strings.Contains(s, want) {
			t.Fatalf("panic %v, want one saying %q", p, want)
		}
	}()
	f()
}

// TestDoubleReleaseCaught plays the bug the invariants build exists for: a holder
// releases a pooled message twice, so the message is freed while a session still has it
// in flight. Without invariants its bytes would be recycled for another publisher's
// message and go out under this one's packet id; with them, the bytes still queued read
// as poison, and the rightful holder's Release panics, naming the mistake.
func TestDoubleReleaseCaught(t *testing.T) {
	m := pub{topic: "a/b", payload: "hello", qos: 1}.pooled()
	var ss []*Session
	for range 2 {
		s, _ := online(t, nil, ConnectInfo{Version: packet.V5})
		deliver(t, s, Delivery{Msg: m, QoS: 1}, at(0), Delivered)
		s.Flush()
		ss = append(ss, s)
	}
	m.Release()
	m.Release() // the bug: the publisher lets go twice
	ss[0].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))

	if !bytes.Equal(m.Payload(), bytes.Repeat([]byte{invariants.PoisonByte}, len("hello"))) {
		t.Errorf("payload %q still queued for the second session after the last reference went: want it poisoned", m.Payload())
	}
	mustPanic(t, "Release of a pooled message already released by its last holder", func() {
		ss[1].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
	})
}

// TestFreedMessageChecks: every use of a pooled message after its last holder released
// it panics, and so does a count taken below zero.
func TestFreedMessageChecks(t *testing.T) {
	freed := func() *Message {
		m := pub{topic: "a", payload: "x", qos: 1}.pooled()
		m.Release()
		return m
	}
	mustPanic(t, "Release of a pooled message already released", func() { freed().Release() })
	mustPanic(t, "entryKept of a pooled message already released", func() { freed().entryKept() })
	mustPanic(t, "pin of a pooled message already released", func() { freed().pin() })

	// Two holders releasing the last reference at once: one frees it, the other takes
	// the count below zero.
	m := pub{topic: "a", payload: "x", qos: 1}.pooled()
	m.pool.refs.Store(0)
	mustPanic(t, "released once more than it was referenced (count -1)", m.Release)

	// What a holder may do is unchanged: an unpooled message is released as often as
	// its entries let go, and a pinned one is never freed.
	u := Message{topic: []byte("a")}
	u.Release()
	u.entryKept()
	u.Release()
	p := pub{topic: "a", payload: "x", qos: 1}.pooled()
	p.pin()
	p.Release()
	p.entryKept()
	p.Release()
	if recycled(p) || string(p.Payload()) != "x" {
		t.Error("a pinned message was freed")
	}
}
