package session

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/invariants"
)

// Pooled messages: the publish path's one copy of a QoS 1/2 message, recycled once every
// window and queue entry that held it has been acknowledged, so that a steady stream of
// QoS 1 messages allocates nothing (a message struct and its bytes per message otherwise,
// the garbage that sets how often the GC runs under load).
//
// A pooled message counts its holders. The publish path holds one reference while it
// delivers (Own → OwnPooled, Release at the end), each window or queue entry one
// (entryKept), dropped when the client's PUBACK, or PUBREC, ends the entry's need for the
// message (entry.done), and the Journal one while the message is stored (refLocked,
// unrefLocked). Every other holder, the retained store, a will, a copy sharing its bytes
// (WithRetain), pins it instead: a pinned message is never recycled and the GC frees it
// as any other. A path that forgets a reference therefore only costs a recycle;
// recycling needs every holder to have let go, so a message still referenced can never
// be reused.
//
// The bytes come from size classes of their own, doubling from 64 B to 16 KiB: a queued
// message's bytes round up by less than 2x (bufpool's classes step by 4x, fine for
// short-lived I/O buffers but not for what a queue keeps). Larger messages are allocated
// exactly and not pooled.
//
// A reference dropped twice is the one mistake the pools cannot survive: the message is
// recycled while a holder still queues it, and another publisher's bytes go out in its
// place. Built with the invariants tag (internal/invariants), a released message is
// poisoned and kept out of the pools instead of recycled, so a later use reads the poison
// and a later Release or entryKept panics; a count going below zero panics too.
const (
	msgMinShift = 6  // 64 B
	msgMaxShift = 14 // 16 KiB
	// pinRefs is added by pin: far more references than can ever be dropped.
	pinRefs = 1 << 30
	// freedRefs marks a released message under invariants: far below any count a
	// stray Release or entryKept can reach from it.
	freedRefs = -1 << 30
)

var (
	messagePool = sync.Pool{New: func() any { return new(Message) }}
	msgBytes    [msgMaxShift - msgMinShift + 1]sync.Pool
)

// msgClass returns the byte class holding n bytes, or -1 above the largest.
func msgClass(n int) int {
	if n <= 1<<msgMinShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - msgMinShift
	if c >= len(msgBytes) {
		return -1
	}
	return c
}

// getMsgBytes returns a buffer of length 0 and capacity at least n, from its class pool.
func getMsgBytes(n int) *[]byte {
	c := msgClass(n)
	if c < 0 {
		b := make([]byte, 0, n)
		return &b
	}
	if v := msgBytes[c].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, 1<<(msgMinShift+c))
	return &b
}

func putMsgBytes(b *[]byte) {
	c := msgClass(cap(*b))
	if c < 0 || cap(*b) != 1<<(msgMinShift+c) {
		return
	}
	msgBytes[c].Put(b)
}

// poolRefs is the reference count of a pooled message; the zero value is an unpooled one.
type poolRefs struct {
	buf  *[]byte      // the pooled bytes; nil: not pooled
	refs atomic.Int32 // holders
}

// OwnPooled is Own for the publish path: an owned copy of a borrowed m from the pools,
// holding one reference for the caller, who calls Release when done delivering it. An
// owned m is returned as it is (and Release does nothing to it).
func (m *Message) OwnPooled() *Message {
	if !m.borrowed {
		return m
	}
	tl, pl := len(m.topic), len(m.payload)
	buf := getMsgBytes(tl + pl + len(m.props))
	data := append(append(append(*buf, m.topic...), m.payload...), m.props...)
	*buf = data
	c := messagePool.Get().(*Message)
	c.topic = data[:tl:tl]
	c.payload = data[tl : tl+pl : tl+pl]
	c.props = data[tl+pl : len(data) : len(data)]
	c.Expiry, c.sid, c.Origin, c.QoS, c.Retain, c.borrowed = m.Expiry, 0, m.Origin, m.QoS, m.Retain, false
	c.pool.buf = buf
	c.pool.refs.Store(1)
	return c
}

// Release drops a reference taken by OwnPooled or entryKept, recycling the message with
// the last one.
func (m *Message) Release() {
	if invariants.Enabled {
		m.releaseChecked()
		return
	}
	if m.pool.buf == nil || m.pool.refs.Add(-1) != 0 {
		return
	}
	putMsgBytes(m.pool.buf)
	m.pool.buf = nil
	m.topic, m.payload, m.props = nil, nil, nil
	messagePool.Put(m)
}

// releaseChecked is Release under invariants. A Release after the last panics, and so
// does one that takes the count below zero (two holders releasing the last reference at
// once). The last one poisons m's bytes and keeps them and m out of the pools, so that a
// holder that outlives its reference reads the poison, and its Release or entryKept
// panics.
func (m *Message) releaseChecked() {
	if m.pool.buf == nil {
		m.checkLive("Release")
		return
	}
	n := m.pool.refs.Add(-1)
	if n < 0 {
		panic(fmt.Sprintf("session: pooled message %q released once more than it was referenced (count %d)", m.topic, n))
	}
	if n != 0 {
		return
	}
	invariants.Poison((*m.pool.buf)[:cap(*m.pool.buf)])
	m.pool.buf = nil
	m.pool.refs.Store(freedRefs)
}

// checkLive panics if m was released by its last holder (under invariants): what
// would use it is a holder that should have let go.
func (m *Message) checkLive(op string) {
	if m.pool.refs.Load() == freedRefs {
		panic("session: " + op + " of a pooled message already released by its last holder (its bytes are poisoned)")
	}
}

// entryKept takes a reference for a window or queue entry (or the Journal) that now
// holds m.
func (m *Message) entryKept() {
	if m.pool.buf != nil {
		m.pool.refs.Add(1)
	} else if invariants.Enabled {
		m.checkLive("entryKept")
	}
}

// pin keeps m from ever being recycled: a holder that does not count keeps it.
func (m *Message) pin() {
	if m.pool.buf != nil {
		m.pool.refs.Add(pinRefs)
	} else if invariants.Enabled {
		m.checkLive("pin")
	}
}

// Pin is pin for holders outside the package (the broker's retained store).
func (m *Message) Pin() { m.pin() }
