package session

import (
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// sweepLimits are testLimits with a Sweeper whose notifications are counted.
func sweepLimits(notified *int) *Limits {
	lim := testLimits()
	lim.Sweeper = NewSweeper(func() { *notified++ })
	return lim
}

// TestSweepOffline: the queued messages of an offline session are dropped once their
// expiry has passed, those without expiry and those not yet expired stay, and the session
// leaves the set with its last expiring message [MQTT-3.3.2-5].
func TestSweepOffline(t *testing.T) {
	var notified int
	lim := sweepLimits(&notified)
	s, c := online(t, lim, ConnectInfo{Version: packet.V5, Expiry: NoExpiry})
	s.Detach(c)
	for _, p := range []pub{
		{topic: "a", payload: "10s", qos: 1, expiry: 10},
		{topic: "b", payload: "never", qos: 1},
		{topic: "c", payload: "100s", qos: 1, expiry: 100},
	} {
		deliver(t, s, Delivery{Msg: p.owned(), QoS: 1}, at(0), Delivered)
	}
	w := lim.Sweeper
	if w.Len() != 1 || notified != 1 {
		t.Fatalf("after queueing: %d in the set, notified %d times; want 1, 1", w.Len(), notified)
	}
	steps := []struct {
		at      time.Duration
		dropped int
		inSet   int
		queued  int
	}{
		{5 * time.Second, 0, 1, 3},
		{20 * time.Second, 1, 1, 2},
		{200 * time.Second, 1, 0, 1},
		{300 * time.Second, 0, 0, 1}, // out of the set: nothing walked
	}
	for _, st := range steps {
		if n := w.Sweep(at(st.at)); n != st.dropped {
			t.Errorf("sweep at %v: dropped %d, want %d", st.at, n, st.dropped)
		}
		_, q := s.Pending()
		if w.Len() != st.inSet || q != st.queued {
			t.Errorf("sweep at %v: %d in the set, %d queued; want %d, %d", st.at, w.Len(), q, st.inSet, st.queued)
		}
	}
	nc := &fakeConn{}
	s.Attach(nc, ConnectInfo{Version: packet.V5, Expiry: NoExpiry}, nil, at(300*time.Second))
	s.Flush()
	equalLines(t, "after reconnecting", nc.lines(t, packet.V5), []string{`PUBLISH "b" q1 id1 "never"`})
}

// TestSweepKeepsInflight: a message whose PUBLISH was sent has started its onward
// delivery and is completed when the client returns, expired or not [MQTT-3.3.2-5];
// only the queued one behind it is dropped.
func TestSweepKeepsInflight(t *testing.T) {
	var notified int
	lim := sweepLimits(&notified)
	lim.ReceiveMaximum = 1
	s, c := online(t, lim, ConnectInfo{Version: packet.V5, Expiry: NoExpiry})
	deliver(t, s, Delivery{Msg: pub{topic: "a", payload: "sent", qos: 1, expiry: 10}.owned(), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: pub{topic: "a", payload: "queued", qos: 1, expiry: 10}.owned(), QoS: 1}, at(0), Delivered)
	s.Flush()
	c.take()
	if lim.Sweeper.Len() != 0 {
		t.Fatal("an online session entered the set")
	}
	s.Detach(c)
	if lim.Sweeper.Len() != 1 {
		t.Fatal("a session gone offline with an expiring queue is not in the set")
	}
	if n := lim.Sweeper.Sweep(at(time.Minute)); n != 1 {
		t.Fatalf("dropped %d, want 1", n)
	}
	nc := &fakeConn{}
	s.Attach(nc, ConnectInfo{Version: packet.V5, Expiry: NoExpiry}, nil, at(time.Minute))
	s.Flush()
	equalLines(t, "after reconnecting", nc.lines(t, packet.V5), []string{`PUBLISH "a" q1 id1 dup exp=1 "sent"`})
}

// TestSweepLeavesOnline: a session that came back is not swept (its queue drains to the
// client, which drops what expired [MQTT-3.3.2-5]) and leaves the set; going offline
// again puts it back.
func TestSweepLeavesOnline(t *testing.T) {
	var notified int
	lim := sweepLimits(&notified)
	lim.ReceiveMaximum = 1
	s, c := online(t, lim, ConnectInfo{Version: packet.V5, Expiry: NoExpiry})
	s.Detach(c)
	deliver(t, s, Delivery{Msg: pub{topic: "a", payload: "1", qos: 1, expiry: 10}.owned(), QoS: 1}, at(0), Delivered)
	deliver(t, s, Delivery{Msg: pub{topic: "a", payload: "2", qos: 1, expiry: 10}.owned(), QoS: 1}, at(0), Delivered)
	nc := &fakeConn{}
	s.Attach(nc, ConnectInfo{Version: packet.V5, Expiry: NoExpiry}, nil, at(0)) // "1" sent, "2" queued behind the window of 1
	if n := lim.Sweeper.Sweep(at(time.Minute)); n != 0 || lim.Sweeper.Len() != 0 {
		t.Fatalf("online: dropped %d, %d in the set; want 0, 0", n, lim.Sweeper.Len())
	}
	s.Detach(nc)
	if n := lim.Sweeper.Sweep(at(time.Minute)); n != 1 || lim.Sweeper.Len() != 0 {
		t.Fatalf("offline again: dropped %d, %d in the set; want 1, 0", n, lim.Sweeper.Len())
	}
	if notified != 2 {
		t.Fatalf("notified %d times, want 2 (once per empty set joined)", notified)
	}
}

// TestSweepEnded: a session that ends leaves the set at once, with its queue.
func TestSweepEnded(t *testing.T) {
	var notified int
	lim := sweepLimits(&notified)
	s, c := online(t, lim, ConnectInfo{Version: packet.V5, Expiry: 60})
	s.Detach(c)
	deliver(t, s, Delivery{Msg: pub{topic: "a", payload: "1", qos: 1, expiry: 10}.owned(), QoS: 1}, at(0), Delivered)
	s.End()
	if lim.Sweeper.Len() != 0 {
		t.Fatal("an ended session stays in the set")
	}
}

// TestSweepDeletesRecords: with a store, the sweep deletes the dropped entries' records
// and the message with its last reference; a message another session still queues
// stays stored.
func TestSweepDeletesRecords(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	var notified int
	lim, j := journalLimits(st)
	lim.Sweeper = NewSweeper(func() { notified++ })
	a := New(1, "a", lim)
	b := New(2, "b", lim)
	for _, s := range []*Session{a, b} {
		c := &fakeConn{}
		s.Attach(c, ConnectInfo{Version: packet.V5, Expiry: NoExpiry}, nil, at(0))
		s.Detach(c)
	}
	// Load, which lists the records, drops what has expired by the clock: the
	// messages expire an hour and a day from now, and the sweeps run later than that.
	now := time.Now()
	message := func(payload string, expiry uint32) *Message {
		p := pub{topic: "t", payload: payload, qos: 1, expiry: expiry}.packet()
		return NewMessage(p, p.Topic, 0, now)
	}
	short, long := message("short", 3600), message("long", 86400)
	deliver(t, a, Delivery{Msg: short, QoS: 1}, now.UnixNano(), Delivered)
	deliver(t, a, Delivery{Msg: long, QoS: 1}, now.UnixNano(), Delivered)
	deliver(t, b, Delivery{Msg: long, QoS: 1}, now.UnixNano(), Delivered)
	j.Commit()
	j.Wait()
	if got := storedQueue(t, st); got != "a:short a:long b:long" || j.StoredMessages() != 2 {
		t.Fatalf("before: queued %q, %d messages stored", got, j.StoredMessages())
	}
	if n := lim.Sweeper.Sweep(now.Add(2 * time.Hour).UnixNano()); n != 1 {
		t.Fatalf("dropped %d, want 1", n)
	}
	j.Commit()
	j.Wait()
	if got := storedQueue(t, st); got != "a:long b:long" || j.StoredMessages() != 1 {
		t.Fatalf("after: queued %q, %d messages stored", got, j.StoredMessages())
	}
	if n := lim.Sweeper.Sweep(now.Add(48 * time.Hour).UnixNano()); n != 2 {
		t.Fatalf("dropped %d, want 2", n)
	}
	j.Commit()
	j.Wait()
	if got := storedQueue(t, st); got != "" || j.StoredMessages() != 0 || lim.Sweeper.Len() != 0 {
		t.Fatalf("at the end: queued %q, %d messages stored, %d in the set", got, j.StoredMessages(), lim.Sweeper.Len())
	}
}

// storedQueue lists the queue entries st holds, as client:payload.
func storedQueue(t testing.TB, st store.Store) string {
	t.Helper()
	v := &queueLister{msgs: map[uint64]string{}}
	if err := st.Load(v); err != nil {
		t.Fatal(err)
	}
	return v.out
}

type queueLister struct {
	msgs map[uint64]string
	out  string
}

func (v *queueLister) Message(id uint64, r store.MessageRecord) error {
	v.msgs[id] = string(r.Payload)
	return nil
}

func (v *queueLister) Queued(cid string, _ uint64, r store.QueuedRecord) error {
	if v.out != "" {
		v.out += " "
	}
	v.out += cid + ":" + v.msgs[r.MessageID]
	return nil
}

func (v *queueLister) Session(store.SessionRecord) error   { return nil }
func (v *queueLister) Inbound(string, uint16) error        { return nil }
func (v *queueLister) Will(string, store.WillRecord) error { return nil }
func (v *queueLister) Retained(string, uint64) error       { return nil }
