package bridge

import (
	"sync"
	"time"
)

// A msg is a message on its way to the remote, owned by the bridge: its topic (the remote
// name), payload and encoded pass-through properties share one allocation.
type msg struct {
	buf    []byte
	tl, pl int
	expiry int64 // Unix nanoseconds; 0: never
	qos    uint8
	retain bool
	dup    bool   // sent before: a resend carries DUP [MQTT-3.3.1-1]
	id     uint16 // packet id while in flight (QoS 1)
}

func newMsg(topic string, payload, props []byte, expiry int64, qos uint8, retain bool) *msg {
	buf := make([]byte, 0, len(topic)+len(payload)+len(props))
	buf = append(append(append(buf, topic...), payload...), props...)
	return &msg{buf: buf, tl: len(topic), pl: len(payload), expiry: expiry, qos: qos, retain: retain}
}

func (m *msg) topic() []byte   { return m.buf[:m.tl] }
func (m *msg) payload() []byte { return m.buf[m.tl : m.tl+m.pl] }
func (m *msg) props() []byte   { return m.buf[m.tl+m.pl:] }
func (m *msg) size() int       { return len(m.buf) }

// remaining is the message expiry interval left at now in whole seconds, rounded up;
// alive is false once it has run out.
func (m *msg) remaining(now time.Time) (secs uint32, has, alive bool) {
	if m.expiry == 0 {
		return 0, false, true
	}
	left := m.expiry - now.UnixNano()
	if left <= 0 {
		return 0, true, false
	}
	return uint32((left + int64(time.Second) - 1) / int64(time.Second)), true, true
}

// A queue holds the messages for the remote: those waiting to be sent, in order, and the
// QoS 1 messages in flight, awaiting the remote's PUBACK. Both count against one bound
// of messages and bytes; a message pushed past it is refused, and the caller counts the
// drop. It is safe for concurrent use: the tap pushes from publishers' goroutines, the
// connection's writer pops and its reader acknowledges.
type queue struct {
	maxMsgs, maxBytes int

	mu       sync.Mutex
	pending  []*msg // pending[head:] wait, oldest first
	head     int
	inflight []*msg // in send order
	bytes    int    // of pending and inflight
	lastID   uint16
	sub      uint16 // a SUBSCRIBE's packet id awaiting its SUBACK; 0: none
}

// push appends m and reports whether it fit.
func (q *queue) push(m *msg) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.len() >= q.maxMsgs || q.bytes+m.size() > q.maxBytes {
		return false
	}
	q.pending = append(q.pending, m)
	q.bytes += m.size()
	return true
}

func (q *queue) len() int { return len(q.pending) - q.head + len(q.inflight) }

// depth is the number of messages held, waiting or in flight.
func (q *queue) depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.len()
}

// next pops the oldest waiting message, or returns nil when none waits or the oldest is
// QoS 1 and window messages are in flight already. A QoS 1 message gets a packet id
// and joins the in-flight window; a QoS 0 one leaves the queue.
func (q *queue) next(window int) *msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.pending) {
		return nil
	}
	m := q.pending[q.head]
	if m.qos > 0 && len(q.inflight) >= window {
		return nil
	}
	q.pending[q.head] = nil
	q.head++
	if q.head > 64 && q.head*2 > len(q.pending) {
		n := copy(q.pending, q.pending[q.head:])
		clear(q.pending[n:])
		q.pending, q.head = q.pending[:n], 0
	}
	if m.qos == 0 {
		q.bytes -= m.size()
		return m
	}
	m.id = q.freeID()
	q.inflight = append(q.inflight, m)
	return m
}

// freeID is a packet id no message in flight uses; the window is below 65,535.
func (q *queue) freeID() uint16 {
	for {
		q.lastID++
		if q.lastID == 0 {
			continue
		}
		used := q.lastID == q.sub
		for _, m := range q.inflight {
			if m.id == q.lastID {
				used = true
				break
			}
		}
		if !used {
			return q.lastID
		}
	}
}

// ack ends the flight of packet id and reports whether one was in flight. PUBACKs come
// mostly in send order, so the search stops at the first entry.
func (q *queue) ack(id uint16) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, m := range q.inflight {
		if m.id == id {
			q.bytes -= m.size()
			q.inflight = append(q.inflight[:i], q.inflight[i+1:]...)
			return true
		}
	}
	return false
}

// unacked returns the messages in flight, in send order, marked as sent before: a new
// connection sends them again first.
func (q *queue) unacked() []*msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]*msg, len(q.inflight))
	copy(out, q.inflight)
	for _, m := range out {
		m.dup = true
	}
	return out
}

// forget removes m, popped by next, without its flight: it was not sent.
func (q *queue) forget(m *msg) {
	if m.qos > 0 {
		q.ack(m.id)
	}
}

// reserveSub takes a packet id for a SUBSCRIBE, kept from PUBLISHes until releaseSub.
func (q *queue) reserveSub() uint16 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sub = q.freeID()
	return q.sub
}

// releaseSub frees the SUBSCRIBE's packet id.
func (q *queue) releaseSub(id uint16) {
	q.mu.Lock()
	if q.sub == id {
		q.sub = 0
	}
	q.mu.Unlock()
}
