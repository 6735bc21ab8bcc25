package broker

import (
	"encoding/binary"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// publishExpiring publishes a QoS 1 message with a Message Expiry Interval of secs (0:
// none) from a 5.0 client.
func (c *tclient) publishExpiring(pid uint16, topic, payload string, secs uint32) {
	p := &packet.Publish{Topic: []byte(topic), Payload: []byte(payload), QoS: 1, PacketID: pid}
	if secs > 0 {
		p.Props.MessageExpiry = packet.Some(secs)
	}
	c.send(p)
}

// queueOffline leaves "sub", a persistent 5.0 session subscribed to e/# at QoS 1,
// offline, and queues one QoS 1 message for it per entry of secs, on e/a, e/b, ...: with
// that Message Expiry Interval and the payload "expires", or with none (0) and the
// payload "kept".
func queueOffline(t testing.TB, b *Broker, secs ...uint32) {
	t.Helper()
	sub := dialT(t, b, packet.V5, "sub", persist(3600))
	sub.subscribe(1, 1, "e/#")
	sub.drop()
	pub := dialT(t, b, packet.V5, "pub", nil)
	for i, s := range secs {
		payload := "expires"
		if s == 0 {
			payload = "kept"
		}
		pub.publishExpiring(uint16(i+1), "e/"+string(rune('a'+i)), payload, s)
	}
	pub.packets()
}

// TestSweepExpiredOffline: while the broker runs, a message queued for an offline
// session is dropped once its Message Expiry Interval has passed, without the client
// coming back: counted as expired, its records deleted from the store. Messages without
// expiry stay and are delivered when the client returns [MQTT-3.3.2-5]. The sweep
// timer runs only while such messages wait.
func TestSweepExpiredOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		b := storeBroker(t, st, nil)
		queueOffline(t, b, 10, 0, 20)
		if d := loadDump(t, st); len(d.queued["sub"]) != 3 || len(d.messages) != 3 {
			t.Fatalf("before: queued %v, messages %v", d.queued["sub"], d.messages)
		}

		time.Sleep(31 * time.Second) // one sweep (every 30s): both expired by then
		synctest.Wait()
		if n := b.stats.dropped[session.DropExpired].Load(); n != 2 {
			t.Fatalf("expired drops counted: %d, want 2", n)
		}
		d := loadDump(t, st)
		if len(d.queued["sub"]) != 1 || len(d.messages) != 1 || b.j.StoredMessages() != 1 {
			t.Fatalf("after: queued %v, messages %v, journal counts %d", d.queued["sub"], d.messages, b.j.StoredMessages())
		}
		if b.live.lim.Sweeper.Len() != 0 {
			t.Fatal("the session stays in the sweep set with no expiring message")
		}
		b.sweep.mu.Lock()
		armed := b.sweep.armed
		b.sweep.mu.Unlock()
		if armed {
			t.Fatal("the sweep timer is armed with nothing to sweep")
		}

		sub := dialT(t, b, packet.V5, "sub", persist(3600))
		equalLines(t, "after reconnecting", sub.lines(), []string{"PUBLISH e/b q1 \"kept\""})
		b.Close()
		st.Close()
	})
}

// TestSweepTimerRearms: a message that has not expired at a sweep keeps the timer going,
// and the next sweep drops it.
func TestSweepTimerRearms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		b := storeBroker(t, st, func(c *conf.Config) { c.Queue.ExpirySweep = conf.Duration(10 * time.Second) })
		queueOffline(t, b, 25)
		for _, step := range []struct {
			wait    time.Duration
			dropped uint64
		}{{11 * time.Second, 0}, {10 * time.Second, 0}, {10 * time.Second, 1}} {
			time.Sleep(step.wait)
			synctest.Wait()
			if n := b.stats.dropped[session.DropExpired].Load(); n != step.dropped {
				t.Fatalf("after %v more: %d dropped, want %d", step.wait, n, step.dropped)
			}
		}
		b.Close()
		st.Close()
	})
}

// TestSweepWithoutStore: without a store the sweep frees the memory the same way.
func TestSweepWithoutStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := conf.Default()
		cfg.Listeners = nil
		cfg.SysInterval = new(conf.Duration)
		b, err := New(Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		queueOffline(t, b, 5)
		time.Sleep(time.Minute)
		synctest.Wait()
		b.mu.Lock()
		s := b.sessions.m["sub"]
		b.mu.Unlock()
		if _, q := s.Pending(); q != 0 || b.stats.dropped[session.DropExpired].Load() != 1 {
			t.Fatalf("queued %d, dropped %d; want 0, 1", q, b.stats.dropped[session.DropExpired].Load())
		}
		b.Close()
	})
}

// TestSweepRestart: what the sweep dropped is gone from the disk, not merely skipped by
// the next Load: the store's raw keys after the broker stops hold no entry or message
// of the expired messages, and a restarted broker delivers only the message left.
// Time is injected: the sweep is run as of two seconds after the messages expired.
func TestSweepRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() store.Store {
		st, err := store.Open(conf.Store{Dir: dir}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	b := storeBroker(t, st, nil)
	queueOffline(t, b, 1, 0, 1)
	b.sweepExpired(time.Now().Add(3 * time.Second).UnixNano())
	b.commitWait()
	b.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	if msgs, entries := rawCounts(t, dir); msgs != 1 || entries != 1 {
		t.Fatalf("on disk after the sweep: %d messages, %d queue entries; want 1, 1", msgs, entries)
	}

	st = open()
	defer st.Close()
	b = storeBroker(t, st, nil)
	sub := dialT(t, b, packet.V5, "sub", persist(3600))
	equalLines(t, "after the restart", sub.lines(), []string{"PUBLISH e/b q1 \"kept\""})
}

// rawCounts opens the store in dir with Pebble itself, bypassing Load and its sweep, and
// counts message records and queue entries (store/store.go, Disk format).
func rawCounts(t *testing.T, dir string) (msgs, entries int) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		switch k[0] {
		case 0x01: // message
			msgs++
		case 0x02: // client: 02 len(2) id kind ...
			n := int(binary.BigEndian.Uint16(k[1:]))
			if len(k) > 3+n && k[3+n] == 0x02 {
				entries++
			}
		}
	}
	return msgs, entries
}

// TestSweepRetainedExpiry: while the broker runs, a retained message whose Message
// Expiry Interval has passed is removed from the topic tree and from the store by the
// expiry sweep; retained messages without expiry, or not yet expired, stay; the timer
// runs only while an expiring retained message remains.
func TestSweepRetainedExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		b := storeBroker(t, st, nil)
		pub := dialT(t, b, packet.V5, "pub", nil)
		retain := func(pid uint16, topic string, secs uint32) {
			p := &packet.Publish{Topic: []byte(topic), Payload: []byte(topic), QoS: 1, PacketID: pid, Retain: true}
			if secs > 0 {
				p.Props.MessageExpiry = packet.Some(secs)
			}
			pub.send(p)
		}
		retain(1, "r/10s", 10)
		retain(2, "r/kept", 0)
		retain(3, "r/100s", 100)
		retain(4, "r/replaced", 10)
		retain(5, "r/replaced", 0) // the same topic, now without expiry: stays
		pub.packets()
		if d := loadDump(t, st); len(d.retained) != 4 {
			t.Fatalf("before: retained %v", d.retained)
		}

		time.Sleep(31 * time.Second) // one sweep (every 30s): r/10s has expired
		synctest.Wait()
		for topic, want := range map[string]bool{"r/10s": false, "r/kept": true, "r/100s": true, "r/replaced": true} {
			if _, ok := b.retained.tree.Get([]byte(topic)); ok != want {
				t.Errorf("after 31s: %s retained %v, want %v", topic, ok, want)
			}
		}
		if d := loadDump(t, st); len(d.retained) != 3 {
			t.Fatalf("after 31s: stored retained %v", d.retained)
		}

		time.Sleep(90 * time.Second) // r/100s expires at 100s; the sweep at 120s removes it
		synctest.Wait()
		if _, ok := b.retained.tree.Get([]byte("r/100s")); ok {
			t.Error("r/100s still retained after its expiry and a sweep")
		}
		if d := loadDump(t, st); len(d.retained) != 2 {
			t.Fatalf("after 121s: stored retained %v", d.retained)
		}
		b.sweep.mu.Lock()
		armed := b.sweep.armed
		b.sweep.mu.Unlock()
		if armed || b.retainedExpiring() {
			t.Fatal("the sweep timer is armed with no expiring retained message")
		}

		sub := dialT(t, b, packet.V5, "sub", nil)
		sub.subscribe(1, 1, "r/#")
		got := sub.lines()
		slices.Sort(got) // the order of retained messages is the tree's
		equalLines(t, "retained delivered", got, []string{"PUBLISH r/kept q1 \"r/kept\"", "PUBLISH r/replaced q1 \"r/replaced\""})
		b.Close()
		st.Close()
	})
}
