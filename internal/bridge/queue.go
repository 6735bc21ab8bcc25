package bridge

import (
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// A msg is a message on its way to the remote, owned by the bridge: its topic (the remote
// name), payload and encoded pass-through properties share one allocation.
type msg struct {
	buf      []byte
	tl, pl   int
	expiry   int64  // Unix nanoseconds; 0: never
	seq, sid uint64 // its entry's seq and its message id in the store; sid 0: not stored
	qos      uint8
	retain   bool
	dup      bool   // sent before: a resend carries DUP [MQTT-3.3.1-1]
	rec      bool   // QoS 2: the remote's PUBREC came; the PUBREL is sent, and again on a resend
	id       uint16 // packet id while in flight (QoS 1 and 2)
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

// record is m as the store keeps it: under its remote topic name.
func (m *msg) record() *store.MessageRecord {
	return &store.MessageRecord{Topic: m.topic(), Payload: m.payload(), Props: m.props(), Expiry: m.expiry,
		QoS: m.qos, Retain: m.retain}
}

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
// QoS 1 and 2 messages in flight, awaiting the remote's PUBACK or PUBCOMP. Both count against one bound
// of messages and bytes (push says what a full queue drops). It is safe for concurrent
// use: the tap pushes from publishers' goroutines, the connection's writer pops and its
// reader acknowledges.
//
// With a journal (the broker's store is on), every QoS 1 and 2 message is also an entry
// of the owned queue cid in the store (store.go explains why a session's records): staged
// when pushed, in the same critical section, so the store sees the entries in queue
// order; deleted when the remote acknowledged it (PUBACK, PUBCOMP), or when it is dropped. QoS 0 messages stay in
// memory only.
type queue struct {
	maxMsgs, maxBytes int
	dropOldest        bool             // a full queue drops its oldest QoS 1 message, not the new one
	j                 *session.Journal // nil: the queue lives in memory only
	cid               string           // the owned queue's client id in the store

	mu       sync.Mutex
	pending  []*msg // pending[head:] wait, oldest first
	head     int
	inflight []*msg // in send order
	bytes    int    // of pending and inflight
	qos0     int    // QoS 0 messages waiting
	stored   int    // messages with an entry in the store
	seq      uint64 // the last store entry's seq
	lastID   uint16
	sub      uint16 // a SUBSCRIBE's packet id awaiting its SUBACK; 0: none
}

// A pushed is what push did: whether the message was kept and staged into the store, and
// how many messages a full queue dropped, by QoS (the new one, or older ones that made
// room for it).
type pushed struct {
	kept, stored bool
	drop0, drop1 int
}

// push appends m. A full queue first drops its oldest waiting QoS 0 message, as often as
// it takes; with none left, a new QoS 0 message is dropped, and a new QoS 1 message is
// dropped too unless dropOldest, which drops the oldest waiting QoS 1 message instead.
// Messages in flight are never dropped.
func (q *queue) push(m *msg) (r pushed) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if m.size() > q.maxBytes {
		r.count(m)
		return r
	}
	for q.len() >= q.maxMsgs || q.bytes+m.size() > q.maxBytes {
		i := q.victim(m.qos)
		if i < 0 {
			r.count(m)
			return r
		}
		r.count(q.dropAt(i))
	}
	q.pending = append(q.pending, m)
	q.bytes += m.size()
	r.kept = true
	if m.qos == 0 {
		q.qos0++
	} else if q.j != nil {
		q.seq++
		m.seq = q.seq
		m.sid = q.j.StageOwnedEntry(q.cid, m.seq, 0, m.record())
		q.stored++
		r.stored = true
	}
	return r
}

func (r *pushed) count(m *msg) {
	if m.qos == 0 {
		r.drop0++
	} else {
		r.drop1++
	}
}

// victim is the index in pending of the message a full queue drops to make room for a
// new message of qos, or -1 to drop the new one. q.mu is held.
func (q *queue) victim(qos uint8) int {
	switch {
	case q.qos0 > 0:
		for i := q.head; i < len(q.pending); i++ {
			if q.pending[i].qos == 0 {
				return i
			}
		}
	case qos > 0 && q.dropOldest && q.head < len(q.pending):
		return q.head
	}
	return -1
}

// dropAt removes pending[i], and its store entry, and returns it. q.mu is held.
func (q *queue) dropAt(i int) *msg {
	m := q.pending[i]
	copy(q.pending[i:], q.pending[i+1:])
	q.pending[len(q.pending)-1] = nil
	q.pending = q.pending[:len(q.pending)-1]
	q.bytes -= m.size()
	if m.qos == 0 {
		q.qos0--
	}
	q.unstore(m)
	return m
}

// unstore stages the deletion of m's store entry, if it has one. q.mu is held.
func (q *queue) unstore(m *msg) bool {
	if m.sid == 0 {
		return false
	}
	q.j.StageOwnedDone(q.cid, m.seq, m.sid)
	m.sid = 0
	q.stored--
	return true
}

func (q *queue) len() int { return len(q.pending) - q.head + len(q.inflight) }

// depth is the number of messages held, waiting or in flight.
func (q *queue) depth() int {
	n, _ := q.depths()
	return n
}

// depths is the number of messages held, and of those with a store entry.
func (q *queue) depths() (held, stored int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.len(), q.stored
}

// next pops the oldest waiting message, or returns nil when none waits or the oldest is
// QoS 1 or 2 and window messages are in flight already. Such a message gets a packet id
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
		q.qos0--
		return m
	}
	m.id = q.freeID()
	q.inflight = append(q.inflight, m)
	return m
}

// sent stages, for a stored QoS 2 message going out for the first time, the packet id
// next gave it, and reports whether it did: the PUBLISH then waits until the store has
// it (conn.awaitSent).
func (q *queue) sent(m *msg) bool {
	if m.qos != 2 || m.dup {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if m.sid == 0 {
		return false
	}
	q.j.StageOwnedSent(q.cid, m.seq, m.sid, m.id, m.qos, m.retain)
	return true
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

// ack ends the flight of packet id (the remote's PUBACK, or PUBCOMP for QoS 2) and
// reports whether one was in flight, and whether the deletion of its store entry was
// staged (the caller commits). Acknowledgements come mostly in send order, so the search
// stops at the first entry.
func (q *queue) ack(id uint16) (found, staged bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ackLocked(id)
}

// received records the remote's PUBREC for the QoS 2 message of packet id and reports
// whether one awaited it: the message stays in flight, and in the store, until the
// PUBCOMP, and a resend after a broken connection is its PUBREL [MQTT-4.4.0-1].
func (q *queue) received(id uint16) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range q.inflight {
		if m.id == id && m.qos == 2 {
			m.rec = true
			return true
		}
	}
	return false
}

// ackLocked is ack. q.mu is held.
func (q *queue) ackLocked(id uint16) (found, staged bool) {
	for i, m := range q.inflight {
		if m.id == id {
			q.bytes -= m.size()
			q.inflight = append(q.inflight[:i], q.inflight[i+1:]...)
			return true, q.unstore(m)
		}
	}
	return false, false
}

// unacked returns the messages in flight, in send order, marked as sent before: a new
// connection sends them again first, as a PUBLISH with DUP, or as a PUBREL for a QoS 2
// message whose PUBREC came.
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

// forget removes m, popped by next, without its flight: it was not sent. It reports
// whether the deletion of its store entry was staged.
func (q *queue) forget(m *msg) bool {
	if m.qos == 0 {
		return false
	}
	_, staged := q.ack(m.id)
	return staged
}

// commit hands what the queue staged to the store, outside the publish path (whose round
// commits). No lock may be held.
func (q *queue) commit() {
	if q.j != nil {
		q.j.Commit()
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
