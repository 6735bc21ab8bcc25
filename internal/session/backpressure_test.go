package session

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// testHolder is a Holder that records the queues it was asked to hold for, refusing when
// refuse is set, and the Drained calls.
type testHolder struct {
	refuse  bool
	holds   []*Session
	drained []*Session
}

func (h *testHolder) Hold(s *Session, _ int) bool {
	if h.refuse {
		return false
	}
	h.holds = append(h.holds, s)
	return true
}

// bpSession is an online session with a window of 1 and a queue of 4 whose Drained calls
// h records.
func bpSession(t *testing.T, h *testHolder) (*Session, *fakeConn) {
	lim := testLimits()
	lim.QueueMessages = 4
	lim.Drained = func(s *Session) { h.drained = append(h.drained, s) }
	return online(t, lim, ConnectInfo{ClientRecvMax: 1})
}

// fill delivers n QoS 1 messages from h, failing the test unless each gets want.
func fill(t *testing.T, s *Session, h Holder, n int, want Drop) {
	t.Helper()
	for i := range n {
		deliver(t, s, Delivery{Msg: msg("t", fmt.Sprint(i)), QoS: 1, Hold: h}, at(0), want)
	}
}

// TestBackpressureOverfill: a message that finds an online session's queue full is queued
// past the bound when its publisher's Holder holds it back, and every message so queued
// reaches the client; the publishers are released once the queue has drained to half its
// bound, not before, and only once. Without a Holder, or with one that refuses, the
// message is dropped as before.
func TestBackpressureOverfill(t *testing.T) {
	h := &testHolder{}
	s, c := bpSession(t, h)
	fill(t, s, h, 1+4, Delivered) // the window and the queue
	if len(h.holds) != 0 {
		t.Fatalf("held back %d times before the queue was full", len(h.holds))
	}
	deliver(t, s, Delivery{Msg: msg("t", "no holder"), QoS: 1}, at(0), DropQueueFull)
	deliver(t, s, Delivery{Msg: msg("t", "refused"), QoS: 1, Hold: &testHolder{refuse: true}}, at(0), DropQueueFull)
	fill(t, s, h, 3, Delivered) // past the bound
	if len(h.holds) != 3 || h.holds[0] != s {
		t.Fatalf("Hold calls %d, want 3 for the session", len(h.holds))
	}
	if _, q := s.Pending(); q != 7 {
		t.Fatalf("%d queued, want 7 (the bound of 4 and 3 held)", q)
	}

	// The client takes them one by one: the publishers are released when 2 (half of 4)
	// are left in the queue.
	s.Flush()
	got := 0
	for pid := uint16(1); ; pid++ {
		ps := c.packets(t, packet.V5)
		got += len(ps)
		if len(ps) == 0 {
			break
		}
		_, q := s.Pending()
		if q > 2 && len(h.drained) != 0 {
			t.Fatalf("released with %d queued, want at most 2", q)
		}
		if q <= 2 && len(h.drained) != 1 {
			t.Fatalf("%d queued and %d Drained calls, want 1", q, len(h.drained))
		}
		ack(s, packet.PUBACK, ps[0].(*packet.Publish).PacketID, packet.Success)
	}
	if got != 8 || len(h.drained) != 1 || h.drained[0] != s {
		t.Fatalf("client got %d messages, want 8; Drained calls %d, want 1", got, len(h.drained))
	}
}

// TestBackpressureOffline: an offline session's full queue drops whatever the Holder, and
// a session that goes offline while it holds publishers back releases them; so does one
// that is cleared.
func TestBackpressureOffline(t *testing.T) {
	for _, end := range []string{"detach", "clear"} {
		t.Run(end, func(t *testing.T) {
			h := &testHolder{}
			s, c := bpSession(t, h)
			fill(t, s, h, 1+4+1, Delivered)
			switch end {
			case "detach":
				s.Detach(c)
			case "clear":
				s.Clear()
			}
			if len(h.drained) != 1 {
				t.Fatalf("%d Drained calls after %s, want 1", len(h.drained), end)
			}
			if end == "detach" {
				fill(t, s, h, 1, DropQueueFull) // offline: at the bound
				if len(h.holds) != 1 {
					t.Fatalf("an offline session asked its publisher to hold (%d calls)", len(h.holds))
				}
			}
		})
	}
}

// TestBackpressureGiveUp: a queue given up releases its publishers and drops what finds it
// full until it has drained to half its bound; then it holds publishers back again.
func TestBackpressureGiveUp(t *testing.T) {
	h := &testHolder{}
	s, c := bpSession(t, h)
	fill(t, s, h, 1+4+1, Delivered)
	if n := s.GiveUp(); n != 5 || len(h.drained) != 1 {
		t.Fatalf("GiveUp = %d, Drained calls %d; want 5 queued, 1 call", n, len(h.drained))
	}
	fill(t, s, h, 1, DropQueueFull)
	if n := s.GiveUp(); n != 0 {
		t.Fatalf("GiveUp of a queue given up = %d, want 0", n)
	}
	s.Flush()
	for range 3 { // 5 queued → 2
		ps := c.packets(t, packet.V5)
		ack(s, packet.PUBACK, ps[0].(*packet.Publish).PacketID, packet.Success)
	}
	fill(t, s, h, 2, Delivered) // back to the bound of 4
	holds := len(h.holds)
	fill(t, s, h, 1, Delivered)
	if len(h.holds) != holds+1 {
		t.Fatal("a queue drained since it was given up did not hold its publisher back")
	}
}
