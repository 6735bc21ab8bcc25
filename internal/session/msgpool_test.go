package session

import (
	"fmt"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// recycled reports whether a pooled message was let go by its last holder: back in the
// pools, or, built with invariants, poisoned and marked freed (msgpool.go).
func recycled(m *Message) bool {
	return m.pool.buf == nil && (m.topic == nil || m.pool.refs.Load() == freedRefs)
}

// pooled returns a pooled copy of a borrowed p, its one reference the caller's.
func (p pub) pooled() *Message {
	m, _ := p.borrowed()
	return m.OwnPooled()
}

func TestMsgClass(t *testing.T) {
	for _, tc := range []struct{ n, class int }{
		{0, 0}, {1, 0}, {64, 0}, {65, 1}, {128, 1}, {129, 2}, {16384, 8}, {16385, -1},
	} {
		if got := msgClass(tc.n); got != tc.class {
			t.Errorf("msgClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
	}
}

// TestPooledMessageLife follows a pooled message through three sessions at QoS 1 and 2: it
// is recycled only when the publisher and every entry have let go, and its bytes are
// intact until then.
func TestPooledMessageLife(t *testing.T) {
	m := pub{topic: "a/b", payload: "hello", qos: 2}.pooled()
	if m.Borrowed() || m.pool.buf == nil {
		t.Fatal("OwnPooled returned a message that is not pooled")
	}
	var ss []*Session
	for i, qos := range []uint8{1, 2, 1} {
		s, _ := online(t, nil, ConnectInfo{Version: packet.V5})
		s.clientID = fmt.Sprint("c", i)
		deliver(t, s, Delivery{Msg: m, QoS: qos}, at(0), Delivered)
		s.Flush()
		ss = append(ss, s)
	}
	m.Release() // the publisher is done
	if recycled(m) {
		t.Fatal("recycled while three entries hold it")
	}
	ss[0].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
	ss[1].Ack(&packet.Ack{PacketType: packet.PUBREC, PacketID: 1}, at(0)) // QoS 2: the message is no longer needed
	if recycled(m) || string(m.Payload()) != "hello" {
		t.Fatal("recycled, or its bytes changed, while one entry holds it")
	}
	ss[1].Ack(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: 1}, at(0))
	ss[0].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0)) // a duplicate: no second release
	if recycled(m) {
		t.Fatal("a duplicate PUBACK released the message again")
	}
	ss[2].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
	if !recycled(m) {
		t.Fatal("not recycled once every holder let go")
	}
}

// TestPooledMessageQueued checks that a queued entry holds its reference too, and that a
// pinned message (a holder that does not count: retained, stored, a copy sharing its
// bytes) is never recycled.
func TestPooledMessageQueued(t *testing.T) {
	lim := testLimits()
	s, _ := online(t, lim, ConnectInfo{Version: packet.V5, ClientRecvMax: 1})
	first := pub{topic: "a", payload: "1", qos: 1}.pooled()
	queued := pub{topic: "a", payload: "2", qos: 1}.pooled()
	deliver(t, s, Delivery{Msg: first, QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: queued, QoS: 1}, at(0), Delivered) // window full: queued
	first.Release()
	queued.Release()
	s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0)) // the queued one goes out
	if !recycled(first) || recycled(queued) {
		t.Fatalf("after the first PUBACK: first recycled %v (want true), queued recycled %v (want false)",
			recycled(first), recycled(queued))
	}
	s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2}, at(0))
	if !recycled(queued) {
		t.Fatal("the queued message was not recycled after its PUBACK")
	}

	pinned := pub{topic: "r", payload: "kept", qos: 1, retain: true}.pooled()
	kept := pinned.WithRetain(false) // shares pinned's bytes
	deliver(t, s, Delivery{Msg: pinned, QoS: 1}, at(0), Delivered)
	pinned.Release()
	s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
	if recycled(pinned) || string(kept.Payload()) != "kept" {
		t.Fatal("a pinned message was recycled")
	}
}

// TestPooledMessagesConcurrent publishes pooled messages to sessions acknowledged on other
// goroutines and checks that every subscriber receives every payload once, in order: a
// message recycled while still referenced would show another one's bytes (and the race
// detector would see the reuse).
func TestPooledMessagesConcurrent(t *testing.T) {
	const subs, msgs = 4, 2000
	lim := testLimits()
	lim.QueueMessages, lim.QueueBytes = msgs, 1<<30 // the acks lag behind: nothing dropped
	type sub struct {
		s    *Session
		c    *fakeConn
		got  int // payloads checked so far
		acks chan uint16
	}
	all := make([]*sub, subs)
	var wg sync.WaitGroup
	for i := range all {
		s, c := online(t, lim, ConnectInfo{Version: packet.V311})
		all[i] = &sub{s: s, c: c, acks: make(chan uint16, msgs)}
		wg.Go(func() {
			for pid := range all[i].acks {
				all[i].s.Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: pid}, at(0))
			}
		})
	}
	// read takes what sub i was sent so far, checks it and acknowledges it.
	read := func(i int) {
		su := all[i]
		su.s.Flush()
		su.s.mu.Lock()
		out := su.c.take()
		su.s.mu.Unlock()
		for _, p := range decodeAll(t, out, packet.V311) {
			pp := p.(*packet.Publish)
			if want := fmt.Sprint("payload-", su.got); string(pp.Payload) != want {
				t.Fatalf("subscriber %d got %q, want %q", i, pp.Payload, want)
			}
			su.got++
			su.acks <- pp.PacketID
		}
	}
	for n := range msgs {
		m := pub{topic: "t", payload: fmt.Sprint("payload-", n), qos: 1}.pooled()
		for i := range all {
			deliver(t, all[i].s, Delivery{Msg: m, QoS: 1}, at(0), Delivered)
			read(i)
		}
		m.Release()
	}
	for i := range all {
		// The ack goroutine frees the window; each read takes what it let through.
		testenv.WaitFor(t, fmt.Sprintf("subscriber %d to get all %d messages", i, msgs), func() bool {
			read(i)
			return all[i].got == msgs
		})
		close(all[i].acks)
	}
	wg.Wait()
}

// TestPooledMessageStored: a pooled message that persistent sessions keep is stored while
// any of them holds it, and the store's reference counts like theirs: the message is
// recycled with the last, not pinned out of the pools (a QoS 1 stream to persistent
// sessions would allocate a message per PUBLISH).
func TestPooledMessageStored(t *testing.T) {
	st := &stepStore{}
	lim, j := journalLimits(st)
	var ss []*Session
	for i := range 2 {
		s, _ := online(t, lim, ConnectInfo{Version: packet.V5, Expiry: 60})
		s.clientID = fmt.Sprint("c", i)
		ss = append(ss, s)
	}
	j.Commit()
	st.finish(t, nil)
	m := pub{topic: "t", payload: "kept", qos: 1}.pooled()
	for _, s := range ss {
		if _, drop, stored := s.DeliverStored(Delivery{Msg: m, QoS: 1}, at(0)); drop != Delivered || !stored {
			t.Fatalf("drop %v stored %v", drop, stored)
		}
	}
	m.Release() // the publish path is done
	j.Commit()
	st.finish(t, nil)
	ss[0].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
	if recycled(m) || j.StoredMessages() != 1 || string(m.Payload()) != "kept" {
		t.Fatalf("after one PUBACK of two: recycled %v, %d stored, payload %q", recycled(m), j.StoredMessages(), m.Payload())
	}
	ss[1].Ack(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}, at(0))
	if !recycled(m) || j.StoredMessages() != 0 {
		t.Fatalf("after the last PUBACK: recycled %v (want true), %d stored (want 0)", recycled(m), j.StoredMessages())
	}
}
