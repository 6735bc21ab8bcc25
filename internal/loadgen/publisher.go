package loadgen

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

const (
	// maxBatch bounds the PUBLISHes written with one write, so that the send times patched
	// into a batch stay close to the moment it leaves.
	maxBatch = 32
	// stallTimeout is how long a closed-loop publisher waits without any of its messages
	// arriving before it writes its window off (see the package doc).
	stallTimeout = 500 * time.Millisecond
)

// A publisher sends PUBLISHes on one connection: its run loop writes them, its ackLoop
// reads the broker's acknowledgements and answers PUBREC with PUBREL.
type publisher struct {
	c     *client
	index uint32
	qos   byte
	subs  int64 // deliveries due per message: the subscribers due it, each with a slot in recv

	// tmpl is one encoded PUBLISH; pidAt and payAt are the offsets of its packet
	// identifier (QoS 1 and 2) and payload, which each copy patches.
	tmpl         []byte
	pidAt, payAt int

	mu       sync.Mutex // guards the window below
	inflight int        // QoS 1/2 PUBLISHes not yet acknowledged
	used     pidSet
	nextPID  uint16

	wake   chan struct{} // capacity 1: an acknowledgement or delivery may have opened the window
	wakeAt atomic.Int64  // the received count at which a subscriber wakes run; MaxInt64: never

	sent atomic.Int64 // PUBLISHes written
	// recv counts, for each subscriber due this publisher's messages, the ones it has
	// received (each once), by the subscriber's slot.
	recv       []atomic.Int64
	acked      atomic.Int64 // PUBACKs or PUBCOMPs
	writtenOff int64        // messages given up on by the closed loop; run only
	stalls     int64        // times the closed loop gave up; run only

	firstSend, lastSend int64 // now() of the first and last write; run only
}

// pidSet marks the packet identifiers in use; identifier 0 is never used.
type pidSet [65536 / 64]uint64

func (s *pidSet) has(id uint16) bool { return s[id>>6]&(1<<(id&63)) != 0 }
func (s *pidSet) set(id uint16)      { s[id>>6] |= 1 << (id & 63) }
func (s *pidSet) clear(id uint16)    { s[id>>6] &^= 1 << (id & 63) }

func newPublisher(c *client, index int, topic string, qos byte, size int, subs int) *publisher {
	p := &publisher{c: c, index: uint32(index), qos: qos, subs: int64(subs), recv: make([]atomic.Int64, subs),
		wake: make(chan struct{}, 1)}
	p.wakeAt.Store(math.MaxInt64)
	pp := packet.Publish{Topic: []byte(topic), QoS: qos, Payload: make([]byte, size)}
	if qos > 0 {
		pp.PacketID = 1
	}
	p.tmpl = pp.AppendTo(nil, c.v)
	p.payAt = len(p.tmpl) - size
	p.pidAt = p.payAt - 2 // 3.1.1: the packet identifier ends the variable header
	if c.v == packet.V5 {
		p.pidAt-- // 5.0: then comes the property length, 0 in one byte
	}
	binary.BigEndian.PutUint32(p.tmpl[p.payAt+8:], p.index)
	return p
}

// received returns how many of its messages every subscriber due them has received:
// the slowest subscriber's count.
func (p *publisher) received() int64 {
	least := int64(math.MaxInt64)
	for i := range p.recv {
		least = min(least, p.recv[i].Load())
	}
	return least
}

// signal wakes run if it waits; it never blocks.
func (p *publisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// pace says how a publisher paces itself.
type pace struct {
	count    int64     // messages to send at most; 0: no limit
	deadline time.Time // stop sending at this time
	rate     float64   // messages per second; 0: closed loop
	window   int       // see Options.Inflight
}

// run sends until the count, the deadline or stop, whichever comes first; the write
// error that ended it, if any, is returned.
func (p *publisher) run(pc pace, stop <-chan struct{}) error {
	buf := make([]byte, 0, maxBatch*len(p.tmpl))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	start := time.Now()
	refill := int64(max(1, min(pc.window/4, maxBatch)))
	var stalledSince int64 // now() when the closed-loop window was last found shut, 0: open
	var stalledAt int64    // received count then
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		t := time.Now()
		if !t.Before(pc.deadline) {
			return nil
		}
		sent := p.sent.Load()
		n := int64(maxBatch)
		if pc.count > 0 {
			n = min(n, pc.count-sent)
			if n <= 0 {
				return nil
			}
		}
		var wait time.Duration // how long to wait when n is 0; 0: until woken
		if pc.rate > 0 {
			due := int64(t.Sub(start).Seconds()*pc.rate) + 1 - sent
			if due <= 0 {
				wait = time.Duration(float64(sent)/pc.rate*float64(time.Second)) - t.Sub(start)
				wait = max(wait, 50*time.Microsecond)
			}
			n = min(n, due)
		} else {
			// Closed loop. Send once the window has room for a batch (a quarter of the
			// window, or what the count leaves), so that a slow broker gets batches rather
			// than one write per delivery, and sleep until then. The window counts the
			// messages the slowest subscriber has not received yet: counting deliveries
			// over all subscribers would let one of S lag S windows behind.
			least := min(refill, n)
			out := sent - p.received() - p.writtenOff
			room := int64(pc.window) - out
			if room < least {
				// Ask the subscribers to wake this loop once the slowest has received
				// enough, then look again: each reads wakeAt after counting, so either
				// the one that brings the least count to the target sees it or this load
				// sees its count.
				target := sent - p.writtenOff - (int64(pc.window) - least)
				p.wakeAt.Store(target)
				d := p.received()
				switch {
				case d >= target:
					continue
				case stalledSince == 0 || d != stalledAt:
					stalledSince, stalledAt = now(), d
				case now()-stalledSince >= int64(stallTimeout):
					p.writtenOff += out
					p.stalls++
					stalledSince = 0
					continue
				}
				wait, n = stallTimeout/4, 0
			} else {
				p.wakeAt.Store(math.MaxInt64)
				n = min(n, room)
			}
		}
		if n > 0 && p.qos > 0 {
			p.mu.Lock()
			free := int64(pc.window - p.inflight)
			if pc.rate == 0 && free < min(refill, n) {
				free = 0 // closed loop: wait for a batch's worth of acknowledgements too
			}
			n = min(n, free)
			p.inflight += int(max(n, 0))
			p.mu.Unlock()
			// The lock is taken again in fill: between the two only run adds to inflight.
		}
		if n <= 0 {
			if !p.waitFor(wait, timer, pc.deadline, stop) {
				return nil
			}
			continue
		}
		buf = p.fill(buf[:0], int(n), sent)
		err := p.c.write(buf)
		ts := now()
		if sent == 0 {
			p.firstSend = ts
		}
		p.lastSend = ts
		if err != nil {
			return err
		}
		p.sent.Add(n)
	}
}

// waitFor waits until woken, for d when d > 0, and until the deadline or stop at most;
// it reports false at the deadline or on stop.
func (p *publisher) waitFor(d time.Duration, timer *time.Timer, deadline time.Time, stop <-chan struct{}) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	if d <= 0 || d > left {
		d = left
	}
	timer.Reset(d)
	select {
	case <-p.wake:
		return true
	case <-timer.C:
		return time.Now().Before(deadline)
	case <-stop:
		return false
	}
}

// fill appends n copies of the template to buf, each with its packet identifier, send
// time and sequence number, and returns buf. At QoS 1 and 2 the caller has counted the n
// messages in the window.
func (p *publisher) fill(buf []byte, n int, seq int64) []byte {
	var pids [maxBatch]uint16
	if p.qos > 0 {
		p.mu.Lock()
		for i := range n {
			pids[i] = p.allocPID()
		}
		p.mu.Unlock()
	}
	ts := uint64(now())
	for i := range n {
		at := len(buf)
		buf = append(buf, p.tmpl...)
		m := buf[at:]
		if p.qos > 0 {
			binary.BigEndian.PutUint16(m[p.pidAt:], pids[i])
		}
		binary.BigEndian.PutUint64(m[p.payAt:], ts)
		binary.BigEndian.PutUint32(m[p.payAt+12:], uint32(seq+int64(i)))
	}
	return buf
}

// allocPID returns a free packet identifier, the next one after the last handed out.
// The window (at most 65535) guarantees that one is free. p.mu is held on entry.
func (p *publisher) allocPID() uint16 {
	for {
		p.nextPID++
		if p.nextPID != 0 && !p.used.has(p.nextPID) {
			p.used.set(p.nextPID)
			return p.nextPID
		}
	}
}

// ackLoop reads the broker's acknowledgements until the connection ends: PUBACK and
// PUBCOMP free their identifier, PUBREC is answered with PUBREL (or frees it when it
// carries an error, which ends the flow). It returns the error
// that ended the connection, nil after the broker closed it.
func (p *publisher) ackLoop() error {
	var (
		ack   packet.Ack
		freed []uint16
		rel   []byte
	)
	c := p.c
	for {
		h, body, ok, err := c.rd.Next()
		if err != nil {
			return err
		}
		if !ok {
			if len(freed) > 0 {
				p.mu.Lock()
				for _, id := range freed {
					if p.used.has(id) {
						p.used.clear(id)
						p.inflight--
					}
				}
				p.mu.Unlock()
				p.acked.Add(int64(len(freed)))
				freed = freed[:0]
				p.signal()
			}
			if len(rel) > 0 {
				if err := c.write(rel); err != nil {
					return c.ended(err)
				}
				rel = rel[:0]
			}
			if err := c.fill(); err != nil {
				return c.ended(err)
			}
			continue
		}
		switch h.Type {
		case packet.PUBACK, packet.PUBCOMP, packet.PUBREC:
			if err := ack.Decode(h, body, c.v); err != nil {
				return err
			}
			if h.Type == packet.PUBREC && !ack.Code.IsError() {
				rel = (&packet.Ack{PacketType: packet.PUBREL, PacketID: ack.PacketID}).AppendTo(rel, c.v)
				continue
			}
			freed = append(freed, ack.PacketID)
		}
	}
}
