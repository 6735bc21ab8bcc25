package broker

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// queueBroker is logBroker with when_full as given.
func queueBroker(t *testing.T, whenFull string, tune func(c *conf.Config)) (*Broker, *logBuf) {
	t.Helper()
	return logBroker(t, func(c *conf.Config) {
		c.Queue.WhenFull = whenFull
		if tune != nil {
			tune(c)
		}
	})
}

// takeAll has the subscriber take and acknowledge, one at a time, every PUBLISH the
// broker sends it (other packets are skipped), calling each (if not nil) before every
// acknowledgement; it returns the payloads in order.
func takeAll(sub *tclient, each func()) []string {
	var got []string
	for {
		ps := sub.packets()
		if len(ps) == 0 {
			return got
		}
		for _, p := range ps {
			pub, ok := p.(*packet.Publish)
			if !ok {
				continue
			}
			got = append(got, string(pub.Payload))
			if each != nil {
				each()
			}
			sub.ack(packet.PUBACK, pub.PacketID)
		}
	}
}

// acks returns the PUBACKs c received, as "PUBACK n".
func acks(c *tclient) []string {
	var out []string
	for _, l := range c.lines() {
		if strings.HasPrefix(l, "PUBACK") {
			out = append(out, l)
		}
	}
	return out
}

func seqAcks(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("PUBACK %d", i+1))
	}
	return out
}

func seqPayloads(id string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s/%d", id, i))
	}
	return out
}

// TestBackpressureHoldsPublisher: with when_full: backpressure, a QoS 1 message that
// finds a connected subscriber's queue full is queued all the same and acknowledged, and
// its publisher is no longer read; it is read again once the subscriber has taken the
// queue down to half its bound, not before. The subscriber gets every message, in order.
// In drop mode the same traffic loses the messages beyond the bound.
func TestBackpressureHoldsPublisher(t *testing.T) {
	for _, mode := range []string{conf.QueueBackpressure, conf.QueueDrop} {
		t.Run(mode, func(t *testing.T) {
			b, _ := queueBroker(t, mode, nil)
			sub := dialT(t, b, packet.V5, "sub", window1)
			sub.subscribe(1, 1, "t/#")
			pub := dialT(t, b, packet.V5, "pub", nil)
			publishN(pub, "t/x", "pub", 0, 4) // one in flight, three queued: the bound
			if pub.c.paused.Load() {
				t.Fatal("publisher held before the queue was full")
			}
			publishN(pub, "t/x", "pub", 4, 6) // past the bound: the rest of a read
			want := seqAcks(0, 6)
			if mode == conf.QueueDrop {
				// Taken by no one: 0x10, no matching subscribers.
				want = append(seqAcks(0, 4), "PUBACK 5 rc=0x10", "PUBACK 6 rc=0x10")
			}
			equalLines(t, "publisher's acknowledgements", acks(pub), want)
			if mode == conf.QueueDrop {
				if pub.c.paused.Load() || b.Held() != 0 {
					t.Fatal("publisher held in drop mode")
				}
				if got := takeAll(sub, nil); len(got) != 4 {
					t.Fatalf("subscriber got %q, want the 4 the bound holds", got)
				}
				if n := b.stats.dropped[session.DropQueueFull].Load(); n != 2 {
					t.Fatalf("%d queue_full drops, want 2", n)
				}
				return
			}
			if !pub.c.paused.Load() || b.Held() != 1 || b.paused.held.total.Load() != 1 {
				t.Fatalf("publisher paused %v, Held() %d, held total %d; want paused, 1, 1",
					pub.c.paused.Load(), b.Held(), b.paused.held.total.Load())
			}
			got := takeAll(sub, func() {
				queued := queuedOf(b, "sub")
				if held := pub.c.paused.Load(); held != (queued > 1) {
					t.Fatalf("%d queued (bound 3): publisher held %v", queued, held)
				}
			})
			equalLines(t, "subscriber", got, seqPayloads("pub", 0, 6))
			if pub.c.paused.Load() || b.Held() != 0 {
				t.Fatal("publisher still held after the queue drained")
			}
			if n := b.stats.dropped[session.DropQueueFull].Load(); n != 0 {
				t.Fatalf("%d messages dropped", n)
			}
		})
	}
}

// queuedOf returns the number of messages queued for the session of client id.
func queuedOf(b *Broker, id string) int {
	b.mu.Lock()
	s := b.sessions.m[id]
	b.mu.Unlock()
	_, queued := s.Pending()
	return queued
}

// TestBackpressureNoDeadlock: a publisher is never held for its own queue (it would
// never read the acknowledgements that drain it), nor for the queue of a client that is
// held itself (two clients that fill each other's queues would wait for each other for
// ever): those messages are dropped, counted and logged, and everyone goes on.
func TestBackpressureNoDeadlock(t *testing.T) {
	t.Run("self", func(t *testing.T) {
		b, logs := queueBroker(t, conf.QueueBackpressure, nil)
		c := dialT(t, b, packet.V5, "self", window1)
		c.subscribe(1, 1, "me/#")
		publishN(c, "me/x", "self", 0, 6)
		if c.c.paused.Load() || b.Held() != 0 {
			t.Fatal("a publisher held back for its own queue")
		}
		if n := b.stats.dropped[session.DropQueueFull].Load(); n != 2 {
			t.Fatalf("%d queue_full drops, want 2", n)
		}
		if l := logs.lines("message dropped", "reason=queue_full", "client=self", "from=self"); len(l) == 0 {
			t.Fatalf("drop lines %q", l)
		}
	})
	t.Run("each other", func(t *testing.T) {
		b, _ := queueBroker(t, conf.QueueBackpressure, nil)
		x := dialT(t, b, packet.V5, "x", window1)
		x.subscribe(1, 1, "to-x")
		y := dialT(t, b, packet.V5, "y", window1)
		y.subscribe(1, 1, "to-y")
		publishN(x, "to-y", "x", 0, 5) // fills y's queue: x is held
		if !x.c.paused.Load() {
			t.Fatal("x not held by y's full queue")
		}
		publishN(y, "to-x", "y", 0, 5) // fills x's queue: x is held, so y is not
		if y.c.paused.Load() {
			t.Fatal("y held by the queue of x, which is held by y's: a deadlock")
		}
		if n := b.stats.dropped[session.DropQueueFull].Load(); n != 1 {
			t.Fatalf("%d queue_full drops, want 1 (y's fifth)", n)
		}
		// y is read: it takes what x sent, and x is read again.
		if got := takeAll(y, nil); len(got) != 5 {
			t.Fatalf("y got %q, want 5 messages", got)
		}
		if x.c.paused.Load() || b.Held() != 0 {
			t.Fatal("x still held after y drained its queue")
		}
		if got := takeAll(x, nil); len(got) != 4 {
			t.Fatalf("x got %q, want the 4 the bound holds", got)
		}
	})
}

// TestBackpressureOfflineDrops: a persistent session that is offline drains only when
// its client is back, so its full queue drops instead of holding publishers; one that
// goes offline while it holds publishers releases them, and its client gets everything
// acknowledged when it returns.
func TestBackpressureOfflineDrops(t *testing.T) {
	b, logs := queueBroker(t, conf.QueueBackpressure, nil)
	sub := dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "t/x", "pub", 0, 5)
	if !pub.c.paused.Load() {
		t.Fatal("publisher not held")
	}
	sub.drop()
	if pub.c.paused.Load() || b.Held() != 0 {
		t.Fatal("publisher still held by a session gone offline")
	}
	publishN(pub, "t/x", "pub", 5, 7)
	if pub.c.paused.Load() {
		t.Fatal("publisher held by an offline session's queue")
	}
	equalLines(t, "publisher's acknowledgements", acks(pub), append(seqAcks(0, 5), "PUBACK 6 rc=0x10", "PUBACK 7 rc=0x10"))
	if n := b.stats.dropped[session.DropQueueFull].Load(); n != 2 {
		t.Fatalf("%d queue_full drops, want 2", n)
	}
	if l := logs.lines("level=WARN", "message dropped", "reason=queue_full", "client=sub", "topic=t/x", "qos=1", "from=pub"); len(l) == 0 {
		t.Fatalf("drop lines: %q", l)
	}
	sub = dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
	// The window's message again (DUP), then the queue, past its bound by the one held.
	equalLines(t, "subscriber", takeAll(sub, nil), seqPayloads("pub", 0, 5))
}

// TestBackpressureMaxPause: a full queue whose client takes nothing for queue.max_pause
// stops holding its publisher, which is read again, and drops what finds it full, with a
// warning; one whose client takes messages, however slowly, goes on holding. The checks
// are run by hand, with the windows' starts moved back by max_pause.
func TestBackpressureMaxPause(t *testing.T) {
	b, logs := queueBroker(t, conf.QueueBackpressure, func(c *conf.Config) {
		c.Queue.MaxPause = conf.Duration(time.Hour) // the timer never fires in the test
	})
	sub := dialT(t, b, packet.V5, "sub", window1)
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "t/x", "pub", 0, 5)
	if !pub.c.paused.Load() {
		t.Fatal("publisher not held")
	}
	elapse := func() {
		b.paused.mu.Lock()
		for _, q := range b.paused.held.queues {
			q.since -= int64(time.Hour)
		}
		b.paused.mu.Unlock()
		b.holdTimer()
	}
	sub.packets()
	sub.ack(packet.PUBACK, 1) // the client took one in the window
	elapse()
	if !pub.c.paused.Load() {
		t.Fatal("publisher released although its queue moved")
	}
	elapse() // and none in the next
	if pub.c.paused.Load() || b.Held() != 0 {
		t.Fatal("publisher still held by a queue that took nothing for max_pause")
	}
	if l := logs.lines("level=WARN", "queue.max_pause", "client=sub", "queued=3"); len(l) != 1 {
		t.Fatalf("give-up lines: %q", l)
	}
	publishN(pub, "t/x", "pub", 5, 6)
	if pub.c.paused.Load() || b.stats.dropped[session.DropQueueFull].Load() != 1 {
		t.Fatal("a queue given up held its publisher again instead of dropping")
	}
}

// TestBackpressureMaxPauseTimer: the max_pause timer runs by itself.
func TestBackpressureMaxPauseTimer(t *testing.T) {
	b, _ := queueBroker(t, conf.QueueBackpressure, func(c *conf.Config) {
		c.Queue.MaxPause = conf.Duration(50 * time.Millisecond)
	})
	sub := dialT(t, b, packet.V5, "sub", window1)
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "t/x", "pub", 0, 5)
	if !pub.c.paused.Load() {
		t.Fatal("publisher not held")
	}
	testenv.WaitFor(t, "the stuck queue given up", func() bool { return !pub.c.paused.Load() })
}

// TestBackpressureAndHardPressure: a publisher both held by a full queue and paused at
// hard memory pressure is read again only when neither holds it, whichever ends first.
func TestBackpressureAndHardPressure(t *testing.T) {
	for _, first := range []string{"pressure", "queue"} {
		t.Run(first+" first", func(t *testing.T) {
			var level atomic.Uint32
			b, _ := queueBroker(t, conf.QueueBackpressure, nil)
			b.mem.press = func() memory.Level { return memory.Level(level.Load()) }
			sub := dialT(t, b, packet.V5, "sub", window1)
			sub.subscribe(1, 1, "t/#")
			pub := dialT(t, b, packet.V5, "pub", nil)
			level.Store(uint32(memory.Hard))
			publishN(pub, "t/x", "pub", 0, 5)
			if !pub.c.paused.Load() || b.Held() != 1 || b.Paused() != 1 {
				t.Fatalf("paused %v, Held %d, Paused %d; want paused, 1, 1", pub.c.paused.Load(), b.Held(), b.Paused())
			}
			endPressure := func() {
				level.Store(uint32(memory.None))
				b.PressureChanged()
			}
			if first == "pressure" {
				endPressure()
			} else {
				takeAll(sub, nil)
			}
			if !pub.c.paused.Load() {
				t.Fatalf("read again once the %s ended, the other still holding it", first)
			}
			if first == "pressure" {
				takeAll(sub, nil)
			} else {
				endPressure()
			}
			if pub.c.paused.Load() || b.Held() != 0 || b.Paused() != 0 {
				t.Fatalf("paused %v, Held %d, Paused %d with neither holding it", pub.c.paused.Load(), b.Held(), b.Paused())
			}
		})
	}
}

// TestBackpressureTurnedOff: a reload to when_full: drop reads every held publisher
// again, and what then finds a full queue is dropped.
func TestBackpressureTurnedOff(t *testing.T) {
	b, _ := queueBroker(t, conf.QueueBackpressure, nil)
	sub := dialT(t, b, packet.V5, "sub", window1)
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "t/x", "pub", 0, 5)
	if !pub.c.paused.Load() {
		t.Fatal("publisher not held")
	}
	next := b.live.cfg.Clone()
	next.Queue.WhenFull = conf.QueueDrop
	if err := b.Reconfigure(next); err != nil {
		t.Fatal(err)
	}
	if pub.c.paused.Load() || b.Held() != 0 {
		t.Fatal("publisher still held after the reload to drop")
	}
	publishN(pub, "t/x", "pub", 5, 6)
	if pub.c.paused.Load() || b.stats.dropped[session.DropQueueFull].Load() != 1 {
		t.Fatal("not dropped in drop mode")
	}
}

// TestBackpressureRestoreKeeps: under backpressure a queue past its bound (a held
// publisher's read, acknowledged) is kept whole by a restart, where drop mode cuts it to
// the bound (TestQueueBoundsOnRestore).
func TestBackpressureRestoreKeeps(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	b := storeBroker(t, st, nil)
	s := dialT(t, b, packet.V5, "s", persist(300))
	s.subscribe(1, 1, "q")
	s.drop()
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "q", "pub", 0, 5)
	pub.packets()
	b.Close()
	b = storeBroker(t, st, func(c *conf.Config) {
		c.Queue.OfflineMessages = 3
		c.Queue.WhenFull = conf.QueueBackpressure
	})
	if d := loadDump(t, st); len(d.queued["s"]) != 5 {
		t.Fatalf("after the restart: queued %d, want the 5 acknowledged", len(d.queued["s"]))
	}
	if n := b.stats.dropped[session.DropQueueFull].Load(); n != 0 {
		t.Fatalf("%d drops counted", n)
	}
	s = dialT(t, b, packet.V5, "s", persist(300))
	equalLines(t, "kept", takeAll(s, nil), seqPayloads("pub", 0, 5))
}
