package session

import "sync"

// flows is the part of a session that only traffic needs: created on the first QoS 1/2
// message, alias or queued message, and dropped when all of it is empty again.
type flows struct {
	// inflight holds outbound QoS 1 and 2 messages sent and not yet acknowledged, in the
	// order they were sent; acknowledgements mostly arrive in that order, so lookups
	// start at the front.
	inflight []entry
	// queue holds QoS 1 and 2 messages waiting for a slot in the client's receive window,
	// or for the client to come back; qhead is its first live element.
	queue      []entry
	qhead      int
	queueBytes int
	nextPID    uint16
	// waiting counts the inflight entries flagged entryWaiting: sent on an earlier
	// connection, not yet again on this one (resumeLocked).
	waiting uint16
	// bp is the queue's backpressure state: bpHeld, bpGivenUp (backpressure.go). It
	// takes a byte of padding: flows stays 128 bytes.
	bp uint8

	// awaitRel holds inbound QoS 2 packet ids whose PUBREC was sent and PUBREL is awaited.
	// They survive reconnects of a persistent session (spec 4.3.3, 4.4).
	awaitRel []uint16

	// Topic aliases live as long as the connection (spec 3.3.2.3.4).
	aliasIn   map[uint16][]byte // client → broker
	aliasOut  map[string]uint16 // broker → client
	aliasNext uint16

	// d is what only a store needs, nil until then: a session without a store, or not
	// persistent and never held, pays one pointer.
	d *durable
}

// durable is the part of the flows that the store needs: the output held until the store
// has what it reveals (hold.go, journal.go), and the numbering of the queue records.
type durable struct {
	held     bool
	holdFrom int    // length of the pending buffer when the hold began
	holdGen  uint64 // the generation the output waits for
	holdWait uint64 // the generation whose waiters list has the session
	marks    []mark // held acknowledgements whose outcome a failed commit changes
	// gates counts the holds taken with Gate and not yet opened (gate.go); gateID names
	// the current run of them, so that a Gate of a connection since closed opens nothing.
	gates  uint32
	gateID uint64
	// nextSeq is the last queue entry number given out: the order of the store's queue
	// records (persistent sessions only). Reuse after the flows are dropped is harmless:
	// every entry's record was deleted first.
	nextSeq uint64
}

var durablePool = sync.Pool{New: func() any { return new(durable) }}

// durable returns f's durable part, creating it.
func (f *flows) durable() *durable {
	if f.d == nil {
		f.d = durablePool.Get().(*durable)
	}
	return f.d
}

// held reports whether output is held: for the store, or by a Gate.
func (f *flows) held() bool { return f.d != nil && (f.d.held || f.d.gates > 0) }

// heldLocked reports whether s's output is held (for the store or by a gate). s's lock
// is held.
func (s *Session) heldLocked() bool { return s.fl != nil && s.fl.held() }

// entry is one message in the inflight window or the queue: a reference to the shared
// message and what is particular to this recipient.
type entry struct {
	msg   *Message
	more  []uint32 // subscription identifiers beyond the first (rare)
	share string   // the $share/... filter the message came through, "" if none
	seq   uint64   // its number in the store's queue records (persistent sessions)
	subID uint32
	pid   uint16
	qos   uint8
	flags uint8
}

const (
	entryRetain   uint8 = 1 << iota // send with the retain flag set
	entryReleased                   // QoS 2: PUBREC received, PUBREL sent, PUBCOMP awaited
	// entryWaiting: sent on an earlier connection, and to be sent again (DUP, same packet
	// id) once the client's Receive Maximum on this one has room (resumeLocked).
	entryWaiting
)

// Delivery is a message addressed to one session.
type Delivery struct {
	Msg    *Message
	QoS    uint8
	Retain bool     // the retain flag this recipient sees
	SubID  uint32   // first subscription identifier, 0 none
	More   []uint32 // further subscription identifiers; the session keeps the slice
	Share  string   // the shared subscription filter it came through, "" if none
	// Hold is the publisher, if it can be held back rather than the message dropped at a
	// full queue (backpressure.go); nil: dropped.
	Hold Holder
}

func (d *Delivery) entry() entry {
	e := entry{msg: d.Msg, more: d.More, share: d.Share, subID: d.SubID, qos: d.QoS}
	if d.Retain {
		e.flags |= entryRetain
	}
	return e
}

// done lets go of the entry's message once the client has acknowledged it: the
// reference entryKept took (msgpool.go).
func (e *entry) done() {
	if e.msg != nil {
		e.msg.Release()
		e.msg = nil
	}
}

func (e *entry) delivery() Delivery {
	return Delivery{Msg: e.msg, QoS: e.qos, Retain: e.flags&entryRetain != 0, SubID: e.subID, More: e.more, Share: e.share}
}

// flowsPool recycles traffic state: a session streaming QoS 1 messages empties its window
// with every acknowledgement, and taking the state (with its window's capacity) from a
// pool keeps that from costing an allocation per message.
var flowsPool = sync.Pool{New: func() any { return new(flows) }}

func (s *Session) flows() *flows {
	if s.fl == nil {
		s.fl = flowsPool.Get().(*flows)
	}
	return s.fl
}

// releaseFlowsIfIdle drops the traffic state, if any, once nothing in it needs keeping.
func (s *Session) releaseFlowsIfIdle() {
	f := s.fl
	if f != nil && len(f.inflight) == 0 && f.queueLen() == 0 && len(f.awaitRel) == 0 && f.aliasIn == nil && f.aliasOut == nil && !f.held() {
		s.fl = nil
		if d := f.d; d != nil {
			*d = durable{marks: d.marks[:0]}
			durablePool.Put(d)
		}
		*f = flows{inflight: f.inflight[:0], queue: f.queue[:0]} // empty, capacity kept
		flowsPool.Put(f)
	}
}

func (f *flows) queueLen() int { return len(f.queue) - f.qhead }

func (f *flows) push(e entry) {
	f.queue = append(f.queue, e)
	f.queueBytes += e.msg.Size()
}

func (f *flows) pop() entry {
	e := f.queue[f.qhead]
	f.queue[f.qhead] = entry{}
	f.qhead++
	f.queueBytes -= e.msg.Size()
	if f.qhead == len(f.queue) {
		f.queue, f.qhead = f.queue[:0], 0
		if cap(f.queue) > 64 {
			f.queue = nil // let a burst's backing array go
		}
	} else if f.qhead > 32 && f.qhead*2 > len(f.queue) {
		n := copy(f.queue, f.queue[f.qhead:])
		clear(f.queue[n:])
		f.queue, f.qhead = f.queue[:n], 0
	}
	return e
}

// resetConnectionState forgets what lives only as long as a connection: topic aliases.
func (f *flows) resetConnectionState() {
	f.aliasIn, f.aliasOut, f.aliasNext = nil, nil, 0
}

// takeShared removes, for redelivery to other members of their groups, the messages that
// came through shared subscriptions: queued ones and sent QoS 1 ones not acknowledged.
// removed, if not nil, is called with each entry removed (to delete its record).
func (f *flows) takeShared(removed func(e *entry)) []Delivery {
	var out []Delivery
	keep := f.inflight[:0]
	for i := range f.inflight {
		e := &f.inflight[i]
		// A QoS 2 message once sent stays with this member: its delivery is completed when
		// the member returns, and never given to another [MQTT-4.8.2-4], [MQTT-4.8.2-5].
		// A sent QoS 1 message may go to another member (spec 4.8.2).
		if e.share != "" && e.qos == 1 {
			if e.flags&entryWaiting != 0 {
				f.waiting--
			}
			out = append(out, e.delivery())
			if removed != nil {
				removed(e)
			}
			continue
		}
		keep = append(keep, *e)
	}
	clear(f.inflight[len(keep):])
	f.inflight = keep
	if f.queueLen() > 0 {
		var q []entry
		for f.queueLen() > 0 {
			e := f.pop()
			if e.share != "" {
				out = append(out, e.delivery())
				if removed != nil {
					removed(&e)
				}
			} else {
				q = append(q, e)
			}
		}
		for _, e := range q {
			f.push(e)
		}
	}
	return out
}

// pidInUse reports whether an outbound packet id is taken by the inflight window.
func (f *flows) pidInUse(pid uint16) bool {
	for i := range f.inflight {
		if f.inflight[i].pid == pid {
			return true
		}
	}
	return false
}

// allocPID returns a free packet identifier [MQTT-2.2.1-2]. The window is at most 65,535
// entries, so one is always free when the caller has checked there is room.
func (f *flows) allocPID() uint16 {
	for {
		f.nextPID++
		if f.nextPID == 0 {
			f.nextPID = 1
		}
		if !f.pidInUse(f.nextPID) {
			return f.nextPID
		}
	}
}

func (f *flows) findInflight(pid uint16) int {
	for i := range f.inflight {
		if f.inflight[i].pid == pid {
			return i
		}
	}
	return -1
}

func (f *flows) removeInflight(i int) {
	if f.inflight[i].flags&entryWaiting != 0 {
		f.waiting--
	}
	copy(f.inflight[i:], f.inflight[i+1:])
	f.inflight[len(f.inflight)-1] = entry{}
	f.inflight = f.inflight[:len(f.inflight)-1]
	if len(f.inflight) == 0 && cap(f.inflight) > 64 {
		f.inflight = nil
	}
}
