package broker

import (
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// TestPublishersPausedAtHard: at hard memory pressure a connection that publishes stops
// being read, one that only subscribes does not (its acknowledgements are what drain its
// queue), and both keep receiving; below hard every paused connection is read again, and
// a closed one is forgotten.
func TestPublishersPausedAtHard(t *testing.T) {
	var level atomic.Uint32
	b := storeBroker(t, store.NewMemory(), nil)
	b.mem.press = func() memory.Level { return memory.Level(level.Load()) }
	sub := dialT(t, b, packet.V5, "sub", nil)
	sub.subscribe(1, 1, "t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	both := dialT(t, b, packet.V5, "both", nil)
	both.subscribe(1, 1, "t/#")
	sub.lines()
	both.lines()

	pub.publish(0, 0, false, "t/a", "before")
	if pub.c.paused.Load() || b.Paused() != 0 {
		t.Fatal("a publisher paused without pressure")
	}
	equalLines(t, "sub", sub.lines(), []string{`PUBLISH t/a q0 "before"`})
	both.lines()

	level.Store(uint32(memory.Soft))
	pub.publish(0, 0, false, "t/b", "soft")
	if pub.c.paused.Load() {
		t.Fatal("a publisher paused at soft pressure")
	}
	equalLines(t, "sub", sub.lines(), []string{`PUBLISH t/b q0 "soft"`})
	both.lines()

	level.Store(uint32(memory.Hard))
	pub.publish(1, 1, false, "t/c", "hard")
	both.publish(2, 1, false, "t/d", "hard too")
	if !pub.c.paused.Load() || !both.c.paused.Load() {
		t.Fatalf("at hard: publisher paused %v, publishing subscriber paused %v; want both",
			pub.c.paused.Load(), both.c.paused.Load())
	}
	// The subscriber acknowledges what it received and is still read.
	got := sub.lines()
	equalLines(t, "sub at hard", got, []string{`PUBLISH t/c q1 "hard"`, `PUBLISH t/d q1 "hard too"`})
	sub.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	sub.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2})
	if sub.c.paused.Load() {
		t.Fatal("a subscriber paused at hard")
	}
	if n := b.Paused(); n != 2 {
		t.Fatalf("Paused() = %d, want 2", n)
	}
	// A change that stays at hard resumes nothing.
	b.PressureChanged()
	if !pub.c.paused.Load() {
		t.Fatal("resumed while still at hard")
	}

	both.drop()
	if n := b.Paused(); n != 1 {
		t.Fatalf("after a paused client closed, Paused() = %d, want 1", n)
	}
	level.Store(uint32(memory.Soft))
	b.PressureChanged()
	if pub.c.paused.Load() || b.Paused() != 0 {
		t.Fatalf("below hard: publisher still paused (%v), Paused() = %d", pub.c.paused.Load(), b.Paused())
	}
}
