package bridge

import (
	"testing"
	"time"
)

func TestQueueBound(t *testing.T) {
	q := &queue{maxMsgs: 3, maxBytes: 1 << 20}
	for i := range 3 {
		if !q.push(newMsg("t", []byte{byte(i)}, nil, 0, 1, false)) {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	if q.push(newMsg("t", nil, nil, 0, 1, false)) {
		t.Fatal("push past queue_messages accepted")
	}
	m := q.next(1)
	if m == nil || m.id == 0 {
		t.Fatalf("next = %+v", m)
	}
	if q.next(1) != nil {
		t.Fatal("a second QoS 1 message left with a window of 1")
	}
	if q.push(newMsg("t", nil, nil, 0, 1, false)) {
		t.Fatal("in-flight messages do not count against the bound")
	}
	if !q.ack(m.id) || q.ack(m.id) {
		t.Fatal("ack of the message in flight")
	}
	if q.depth() != 2 || !q.push(newMsg("t", nil, nil, 0, 1, false)) {
		t.Fatalf("depth %d after an ack, or no room", q.depth())
	}
	b := &queue{maxMsgs: 10, maxBytes: 10}
	if !b.push(newMsg("t", make([]byte, 9), nil, 0, 0, false)) || b.push(newMsg("t", nil, nil, 0, 0, false)) {
		t.Fatal("queue_bytes not enforced")
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
