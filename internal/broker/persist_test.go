package broker

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

var versions = []packet.Version{packet.V311, packet.V5}

// TestDurableAckWaitsForStore: the PUBACK of a message a persistent session queued is
// not written before the store reports its commit, and what the connection is sent after
// it (a PUBACK that needed no store, a PINGRESP) waits behind it, in order
// [MQTT-4.6.0-2]. The event loop is not blocked meanwhile: OnData returns.
func TestDurableAckWaitsForStore(t *testing.T) {
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			inner := store.NewMemory()
			defer inner.Close()
			g := &gateStore{Store: inner}
			b := storeBroker(t, g, nil)
			sub := dialT(t, b, v, "sub", persist(300))
			sub.subscribe(1, 1, "d/#")
			sub.drop()
			pub := dialT(t, b, v, "pub", nil)

			g.close()
			pub.publish(1, 1, false, "d/x", "kept")
			pub.publish(2, 1, false, "n/x", "nobody")
			pub.send(packet.Pingreq{})
			if got := pub.c.take(); len(got) != 0 {
				t.Fatalf("written before the commit: % x", got)
			}
			g.open()
			want := []string{"PUBACK 1", "PUBACK 2", "PINGRESP"}
			if v == packet.V5 {
				want[1] = "PUBACK 2 rc=0x10" // no matching subscribers
			}
			equalLines(t, "publisher got", pub.lines(), want)
		})
	}
}

// TestNonDurableNotHeld: without a persistent recipient nothing waits for the store.
func TestNonDurableNotHeld(t *testing.T) {
	inner := store.NewMemory()
	defer inner.Close()
	g := &gateStore{Store: inner}
	b := storeBroker(t, g, nil)
	sub := dialT(t, b, packet.V5, "sub", nil)
	sub.subscribe(1, 1, "d/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	g.close()
	defer g.open()
	pub.publish(1, 1, false, "d/x", "m")
	if got := pub.c.take(); len(got) == 0 {
		t.Fatal("the PUBACK of a message no persistent session keeps waited for the store")
	}
}

// TestStoredOnce: a message queued for three persistent sessions is stored once, and
// deleted with the last acknowledgement.
func TestStoredOnce(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	b := storeBroker(t, st, nil)
	ids := []string{"s1", "s2", "s3"}
	for _, id := range ids {
		s := dialT(t, b, packet.V5, id, persist(300))
		s.subscribe(1, 1, "t")
		s.drop()
	}
	pub := dialT(t, b, packet.V5, "pub", nil)
	pub.publish(1, 1, false, "t", "shared")
	equalLines(t, "publisher", pub.lines(), []string{"PUBACK 1"})
	d := loadDump(t, st)
	if len(d.messages) != 1 || b.j.StoredMessages() != 1 {
		t.Fatalf("messages stored %v, counted %d; want 1", d.messages, b.j.StoredMessages())
	}
	for _, id := range ids {
		if q := d.queued[id]; len(q) != 1 || d.messages[q[0].MessageID] != "shared" {
			t.Fatalf("%s queue %+v", id, q)
		}
	}
	for i, id := range ids {
		s := dialT(t, b, packet.V5, id, persist(300))
		p, ok := s.next().(*packet.Publish)
		if !ok || string(p.Payload) != "shared" {
			t.Fatalf("%s got %v", id, p)
		}
		s.ack(packet.PUBACK, p.PacketID)
		s.packets()
		d := loadDump(t, st)
		if n := len(d.messages); n != min(1, len(ids)-1-i) {
			t.Fatalf("after %d acks, %d messages stored", i+1, n)
		}
		if len(d.queued[id]) != 0 {
			t.Fatalf("%s: acknowledged entry still stored: %+v", id, d.queued[id])
		}
	}
	if n := b.j.StoredMessages(); n != 0 {
		t.Fatalf("journal counts %d stored messages after the last ack", n)
	}
}

// TestDiskFull: while commits fail, a durable PUBLISH is refused: 5.0 with 0x97 (disk
// full) or 0x80 (another write error), 3.1.1 by closing the connection without an ack.
// The broker stays up, accepts again once the store does, and a restart finds every
// message it acknowledged.
func TestDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    packet.Version
		err  error
		rc   string
	}{
		{"V5/NoSpace", packet.V5, fmt.Errorf("%w: %w", store.ErrWrite, store.ErrNoSpace), "0x97"},
		{"V5/IO", packet.V5, fmt.Errorf("%w: input/output error", store.ErrWrite), "0x80"},
		{"V311/NoSpace", packet.V311, fmt.Errorf("%w: %w", store.ErrWrite, store.ErrNoSpace), ""},
	} {
		t.Run(tc.name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { testDiskFull(t, tc.v, tc.err, tc.rc) }) })
	}
}

func testDiskFull(t *testing.T, v packet.Version, fault error, rc string) {
	inner := store.NewMemory()
	defer inner.Close()
	f := &faultStore{Store: inner}
	b := storeBroker(t, f, nil)
	sub := dialT(t, b, packet.V5, "sub", persist(300))
	sub.subscribe(1, 2, "f/#")
	sub.drop()
	pub := dialT(t, b, v, "pub", persist(300))

	f.set(fault)
	pub.publish(1, 1, false, "f/a", "refused-1")
	if v == packet.V5 {
		equalLines(t, "QoS 1 on a full disk", pub.lines(), []string{"PUBACK 1 rc=" + rc})
		pub.publish(2, 2, false, "f/b", "refused-2")
		equalLines(t, "QoS 2 on a full disk", pub.lines(), []string{"PUBREC 2 rc=" + rc})
	} else {
		if got := pub.lines(); len(got) != 0 || !pub.c.shutdown.Load() {
			t.Fatalf("3.1.1 on a full disk: got %q, closed %v; want no ack and the connection closed",
				got, pub.c.shutdown.Load())
		}
		pub.drop()
	}

	f.set(nil)
	// The first commit after a failure rewrites the whole state, at most once a
	// second (session/journal.go); until then commits are reported failed.
	time.Sleep(time.Second)
	if v != packet.V5 {
		pub = dialT(t, b, v, "pub", persist(300))
	}
	pub.publish(3, 1, false, "f/c", "kept-3")
	equalLines(t, "QoS 1 after", pub.lines(), []string{"PUBACK 3"})
	// In 5.0 the refused QoS 2 exchange ended: its packet id is free again.
	pub.publish(2, 2, false, "f/d", "kept-4")
	equalLines(t, "QoS 2 after", pub.lines(), []string{"PUBREC 2"})
	pub.ack(packet.PUBREL, 2)
	equalLines(t, "PUBCOMP", pub.lines(), []string{"PUBCOMP 2"})
	b.Close()

	b2 := storeBroker(t, f, nil)
	sub = dialT(t, b2, packet.V5, "sub", persist(300))
	got := map[string]bool{}
	for _, p := range sub.packets() {
		if p, ok := p.(*packet.Publish); ok {
			got[string(p.Payload)] = true
		}
	}
	for _, want := range []string{"kept-3", "kept-4"} {
		if !got[want] {
			t.Errorf("acknowledged %q lost across the restart; got %v", want, got)
		}
	}
	b2.Close()
}

// TestRestoreFlows: after a restart a session finds its inflight messages in both
// directions with their packet ids, its queue and its subscriptions; the retained
// messages are back.
func TestRestoreFlows(t *testing.T) {
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			st := store.NewMemory()
			defer st.Close()
			b := storeBroker(t, st, nil)
			sub := dialT(t, b, v, "sub", persist(300))
			sub.subscribe(1, 2, "a/#")
			pub := dialT(t, b, v, "pub", persist(300))
			pub.publish(1, 1, false, "a/1", "one")
			pub.publish(2, 2, false, "a/2", "two")
			pub.publish(3, 2, false, "a/3", "three")
			pub.publish(4, 1, true, "r/1", "retained")
			want := []string{"PUBACK 1", "PUBREC 2", "PUBREC 3", "PUBACK 4"}
			if v == packet.V5 {
				want[3] += " rc=0x10" // retained, but no subscriber
			}
			equalLines(t, "publisher", pub.lines(), want)
			var pids []uint16
			for range 3 {
				pids = append(pids, sub.next().(*packet.Publish).PacketID)
			}
			sub.ack(packet.PUBREC, pids[2]) // a/3: released, PUBCOMP not sent
			equalLines(t, "PUBREL", sub.lines(), []string{fmt.Sprintf("PUBREL %d", pids[2])})
			sub.drop()
			pub.publish(5, 1, false, "a/5", "five") // queued for the offline sub
			pub.publish(9, 2, false, "b/9", "nine") // awaits PUBREL across the restart
			want = []string{"PUBACK 5", "PUBREC 9"}
			if v == packet.V5 {
				want[1] = "PUBREC 9 rc=0x10" // no subscriber
			}
			equalLines(t, "publisher", pub.lines(), want)
			pub.drop()
			b.Close()

			b = storeBroker(t, st, nil)
			watch := dialT(t, b, v, "watch", nil)
			watch.subscribe(1, 2, "b/#")
			sub = dialT(t, b, v, "sub", persist(300))
			equalLines(t, "resumed", sub.lines(), []string{
				`PUBLISH a/1 q1 "one" dup`, `PUBLISH a/2 q2 "two" dup`,
				fmt.Sprintf("PUBREL %d", pids[2]), `PUBLISH a/5 q1 "five"`})
			pub = dialT(t, b, v, "pub", persist(300))
			pub.send(&packet.Publish{Topic: []byte("b/9"), Payload: []byte("nine"), QoS: 2, PacketID: 9, Dup: true})
			equalLines(t, "resent QoS 2", pub.lines(), []string{"PUBREC 9"})
			pub.ack(packet.PUBREL, 9)
			equalLines(t, "released", pub.lines(), []string{"PUBCOMP 9"})
			if got := watch.lines(); len(got) != 0 {
				t.Fatalf("a QoS 2 message resent after the restart was delivered again: %q", got)
			}
			pub.publish(6, 1, false, "a/6", "six") // the subscription is back
			pub.packets()
			if got := sub.lines(); len(got) != 1 || got[0] != `PUBLISH a/6 q1 "six"` {
				t.Fatalf("after the restart the subscription got %q", got)
			}
			r := dialT(t, b, v, "r", nil)
			r.subscribe(1, 1, "r/#")
			equalLines(t, "retained", r.lines(), []string{`PUBLISH r/1 q1 "retained"`})
		})
	}
}

// TestSessionExpiry: a persistent session that expires while the broker runs leaves
// nothing in the store.
func TestSessionExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		b := storeBroker(t, st, nil)
		s := dialT(t, b, packet.V5, "s", persist(10))
		s.subscribe(1, 1, "x")
		s.drop()
		pub := dialT(t, b, packet.V5, "pub", nil)
		pub.publish(1, 1, false, "x", "m")
		pub.packets()
		if d := loadDump(t, st); len(d.sessions) != 1 || len(d.messages) != 1 {
			t.Fatalf("before expiry: sessions %v, messages %v", d.sessions, d.messages)
		}
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if d := loadDump(t, st); len(d.sessions) != 1 {
			t.Fatal("session gone before its expiry")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if d := loadDump(t, st); len(d.sessions) != 0 || len(d.messages) != 0 || len(d.queued) != 0 {
			t.Fatalf("after expiry: sessions %v, messages %v, queued %v", d.sessions, d.messages, d.queued)
		}
		b.Close()
		st.Close()
	})
}

// TestExpiryAcrossRestart: time that passed while the broker was down counts. A session
// whose expiry ran out is ended at restore (its delayed will published, since the session
// ended first [MQTT-3.1.3-9]), and a queued message whose expiry ran out is swept, not
// delivered [MQTT-3.3.2-5].
func TestExpiryAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		b := storeBroker(t, st, nil)
		w := dialT(t, b, packet.V5, "watch", persist(300))
		w.subscribe(1, 1, "will/#")
		w.drop()
		q := dialT(t, b, packet.V5, "q", persist(300))
		q.subscribe(1, 1, "m")
		q.drop()
		c := dialT(t, b, packet.V5, "c", func(c *packet.Connect) {
			persist(10)(c)
			c.WillFlag, c.WillQoS, c.WillTopic, c.WillPayload = true, 1, []byte("will/c"), []byte("gone")
			c.WillProps.WillDelay = packet.Some[uint32](5)
		})
		c.drop()
		pub := dialT(t, b, packet.V5, "pub", nil)
		pub.send(&packet.Publish{Topic: []byte("m"), Payload: []byte("short"), QoS: 1, PacketID: 1,
			Props: packet.Properties{MessageExpiry: packet.Some[uint32](5)}})
		pub.packets()
		time.Sleep(time.Second)
		b.Close()

		time.Sleep(20 * time.Second)
		b = storeBroker(t, st, nil)
		if b.sessions.m["c"] != nil {
			t.Fatal("an expired session was restored")
		}
		d := loadDump(t, st)
		if _, ok := d.sessions["c"]; ok {
			t.Fatal("an expired session is still stored")
		}
		if len(d.queued["q"]) != 0 {
			t.Fatalf("an expired message is still queued: %+v", d.queued["q"])
		}
		if len(d.queued["watch"]) != 1 || len(d.messages) != 1 {
			t.Fatalf("the will was not queued for the watcher: queued %v, messages %v", d.queued, d.messages)
		}
		w = dialT(t, b, packet.V5, "watch", persist(300))
		equalLines(t, "watcher", w.lines(), []string{`PUBLISH will/c q1 "gone"`})
		q = dialT(t, b, packet.V5, "q", persist(300))
		if got := q.lines(); len(got) != 0 {
			t.Fatalf("expired message delivered: %q", got)
		}
		b.Close()
		st.Close()
	})
}

// TestWillDelayAcrossRestart: a will waiting out its delay when the broker stops is
// published when the delay, counted from the disconnect, ends, not before.
func TestWillDelayAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		b := storeBroker(t, st, nil)
		w := dialT(t, b, packet.V5, "watch", persist(300))
		w.subscribe(1, 1, "will/#")
		w.drop()
		c := dialT(t, b, packet.V5, "c", func(c *packet.Connect) {
			persist(300)(c)
			c.WillFlag, c.WillQoS, c.WillTopic, c.WillPayload = true, 1, []byte("will/c"), []byte("late")
			c.WillProps.WillDelay = packet.Some[uint32](30)
		})
		c.drop()
		time.Sleep(10 * time.Second)
		b.Close()
		time.Sleep(5 * time.Second)
		b = storeBroker(t, st, nil)
		queued := func() int {
			synctest.Wait()
			_, n := b.sessions.m["watch"].Pending()
			return n
		}
		time.Sleep(14 * time.Second) // 29s after the disconnect
		if n := queued(); n != 0 {
			t.Fatalf("will published %ds early", 30-29)
		}
		time.Sleep(2 * time.Second)
		if n := queued(); n != 1 {
			t.Fatalf("will not published after its delay: %d queued", n)
		}
		if d := loadDump(t, st); len(d.wills) != 0 {
			t.Fatalf("published will still stored: %v", d.wills)
		}
		b.Close()
		st.Close()
	})
}

// TestReconnectCancelsRestoredWill: a client back before its will's delay ends, after a
// restart, cancels it [MQTT-3.1.3-9].
func TestReconnectCancelsRestoredWill(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	b := storeBroker(t, st, nil)
	w := dialT(t, b, packet.V5, "watch", nil)
	w.subscribe(1, 1, "will/#")
	c := dialT(t, b, packet.V5, "c", func(c *packet.Connect) {
		persist(300)(c)
		c.WillFlag, c.WillQoS, c.WillTopic, c.WillPayload = true, 1, []byte("will/c"), []byte("x")
		c.WillProps.WillDelay = packet.Some[uint32](60)
	})
	c.drop()
	b.Close()
	b = storeBroker(t, st, nil)
	if d := loadDump(t, st); d.wills["c"].Delay != 60 || string(d.wills["c"].Payload) != "x" {
		t.Fatalf("stored will %+v", d.wills["c"])
	}
	w = dialT(t, b, packet.V5, "watch", nil)
	w.subscribe(1, 1, "will/#")
	dialT(t, b, packet.V5, "c", persist(300))
	if got := w.lines(); len(got) != 0 {
		t.Fatalf("cancelled will published: %q", got)
	}
	if d := loadDump(t, st); len(d.wills) != 0 {
		t.Fatalf("cancelled will still stored: %v", d.wills)
	}
}

// TestQueueBoundsOnRestore: a queue longer than the configured bound (lowered since) is
// cut on restore, newest first, and what was cut leaves the store.
func TestQueueBoundsOnRestore(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	b := storeBroker(t, st, nil)
	s := dialT(t, b, packet.V5, "s", persist(300))
	s.subscribe(1, 1, "q")
	s.drop()
	pub := dialT(t, b, packet.V5, "pub", nil)
	for i := range 5 {
		pub.publish(uint16(i+1), 1, false, "q", fmt.Sprint(i))
	}
	pub.packets()
	b.Close()
	b = storeBroker(t, st, func(c *conf.Config) { c.Queue.OfflineMessages = 3 })
	if d := loadDump(t, st); len(d.queued["s"]) != 3 || len(d.messages) != 3 {
		t.Fatalf("after the bound: queued %d, messages %d; want 3", len(d.queued["s"]), len(d.messages))
	}
	if n := b.stats.dropped[1].Load(); n != 2 {
		t.Fatalf("%d drops counted, want 2", n)
	}
	s = dialT(t, b, packet.V5, "s", persist(300))
	equalLines(t, "kept", s.lines(), []string{`PUBLISH q q1 "0"`, `PUBLISH q q1 "1"`, `PUBLISH q q1 "2"`})
}
