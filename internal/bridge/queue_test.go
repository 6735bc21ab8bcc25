package bridge

import (
	"strings"
	"testing"
	"time"
)

func TestQueueBound(t *testing.T) {
	q := &queue{maxMsgs: 3, maxBytes: 1 << 20}
	for i := range 3 {
		if !q.push(newMsg("t", []byte{byte(i)}, nil, 0, 1, false)).kept {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	if q.push(newMsg("t", nil, nil, 0, 1, false)).kept {
		t.Fatal("push past queue_messages accepted")
	}
	m := q.next(1)
	if m == nil || m.id == 0 {
		t.Fatalf("next = %+v", m)
	}
	if q.next(1) != nil {
		t.Fatal("a second QoS 1 message left with a window of 1")
	}
	if q.push(newMsg("t", nil, nil, 0, 1, false)).kept {
		t.Fatal("in-flight messages do not count against the bound")
	}
	if found, _ := q.ack(m.id); !found {
		t.Fatal("ack of the message in flight")
	}
	if found, _ := q.ack(m.id); found {
		t.Fatal("ack of the message in flight")
	}
	if q.depth() != 2 || !q.push(newMsg("t", nil, nil, 0, 1, false)).kept {
		t.Fatalf("depth %d after an ack, or no room", q.depth())
	}
	b := &queue{maxMsgs: 10, maxBytes: 10}
	if !b.push(newMsg("t", make([]byte, 9), nil, 0, 1, false)).kept || b.push(newMsg("t", nil, nil, 0, 1, false)).kept {
		t.Fatal("queue_bytes not enforced")
	}
	if r := b.push(newMsg("t", make([]byte, 11), nil, 0, 0, false)); r.kept || r.drop0 != 1 || b.depth() != 1 {
		t.Fatalf("a message above queue_bytes alone: %+v, depth %d", r, b.depth())
	}
}

// TestQueueFull: a full queue drops its oldest waiting QoS 0 message first, then the new
// message (drop_new) or the oldest waiting QoS 1 one (drop_oldest); never one in flight;
// each drop counted by QoS.
func TestQueueFull(t *testing.T) {
	for _, oldest := range []bool{false, true} {
		q := &queue{maxMsgs: 4, maxBytes: 1 << 20, dropOldest: oldest}
		push := func(payload string, qos uint8) pushed {
			return q.push(newMsg("t", []byte(payload), nil, 0, qos, false))
		}
		push("a1", 1)
		push("b0", 0)
		push("c1", 1)
		push("d0", 0)
		if r := push("e1", 1); !r.kept || r.drop0 != 1 || r.drop1 != 0 {
			t.Fatalf("oldest=%v: a QoS 1 message into a full queue with QoS 0 waiting: %+v", oldest, r)
		}
		if r := push("f0", 0); !r.kept || r.drop0 != 1 {
			t.Fatalf("oldest=%v: a QoS 0 message into a full queue with QoS 0 waiting: %+v", oldest, r)
		}
		if m := q.next(1); string(m.payload()) != "a1" {
			t.Fatalf("oldest=%v: first out %q", oldest, m.payload()) // a1 is now in flight
		}
		if r := push("g0", 0); !r.kept || r.drop0 != 1 {
			t.Fatalf("oldest=%v: QoS 0 for QoS 0: %+v", oldest, r) // f0 made room
		}
		if r := push("h0", 0); !r.kept || r.drop0 != 1 {
			t.Fatalf("oldest=%v: QoS 0 for QoS 0: %+v", oldest, r) // g0 made room
		}
		// Only QoS 1 left: x1 in flight, y1 and z1 waiting.
		q = &queue{maxMsgs: 3, maxBytes: 1 << 20, dropOldest: oldest}
		push("x1", 1)
		push("y1", 1)
		push("z1", 1)
		q.next(1)
		r0 := push("i0", 0)
		r1 := push("j1", 1)
		var got []string
		for _, m := range q.pending[q.head:] {
			got = append(got, string(m.payload()))
		}
		want := "y1 z1"
		if oldest {
			want = "z1 j1"
		}
		if r0.kept || r0.drop0 != 1 || r1.kept != oldest || r1.drop1 != 1 || strings.Join(got, " ") != want {
			t.Fatalf("oldest=%v: %+v %+v, waiting %v, want %s", oldest, r0, r1, got, want)
		}
		if q.len() != 3 || len(q.inflight) != 1 {
			t.Fatalf("oldest=%v: %d held, %d in flight", oldest, q.len(), len(q.inflight))
		}
	}
}

func TestQueueResend(t *testing.T) {
	q := &queue{maxMsgs: 10, maxBytes: 1 << 20}
	for range 3 {
		q.push(newMsg("t", nil, nil, 0, 1, false))
	}
	a, b := q.next(5), q.next(5)
	q.ack(a.id)
	un := q.unacked()
	if len(un) != 1 || un[0] != b || !b.dup {
		t.Fatalf("unacked = %+v", un)
	}
	c := q.next(5)
	if c.id == b.id {
		t.Fatal("a packet id in flight was reused")
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{base: time.Second, cap: 4 * time.Second}
	for range 100 {
		if d := b.next(); d < time.Second || d > 4*time.Second {
			t.Fatalf("wait %s outside base..cap", d)
		}
	}
	c := backoff{base: 2 * time.Second, cap: 2 * time.Second}
	if c.next() != 2*time.Second {
		t.Fatal("a constant restart_timeout is not constant")
	}
}
