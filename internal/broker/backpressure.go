package broker

import (
	"log/slog"
	"slices"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Backpressure: publishers held back by full queues (queue.when_full: backpressure)
//
// A QoS 1 or 2 message from a client that finds a connected subscriber's queue full is
// queued all the same, its PUBACK or PUBREC goes out as usual, and the publisher's
// connection stops being read (listener.Pauser, as at hard memory pressure: pause.go)
// once the packets of the read at hand are handled. TCP then holds the publisher. When
// the queue has drained to half its bounds the session calls Limits.Drained (queueDrained
// here), from the subscriber's PUBACKs or the pump that follows its connection draining,
// and every publisher that waited for that queue, and for no other, is read again: no
// timer or poll per connection.
//
// What cannot be held:
//
//   - a publisher's own session: it would never read the PUBACKs that drain it;
//   - a session whose own connection is held: two publishers that fill each other's
//     queues would wait for each other for ever, so the second to find the other's queue
//     full drops, as in drop mode, while the first is held;
//   - an offline session: its queue drains only when its client is back, hours perhaps:
//     it drops at its bounds, as in drop mode (session.Session.overfillLocked);
//   - sources that are not a client's connection: the embedding API, wills, $SYS, other
//     nodes of a cluster; they drop at the bounds.
//
// A subscriber that is connected but takes nothing (an application stuck in its message
// handler, or waiting for an answer from a publisher it holds) would hold its publishers
// for ever. A full queue whose client has taken no message from it for queue.max_pause is
// given up (session.Session.GiveUp): its publishers are read again and the messages that
// find it full are dropped, counted and logged, until it drains to half its bounds. One
// timer, armed while some queue holds a publisher, checks the oldest.
//
// The queue goes past its bounds by what the held publishers had read: the rest of the
// read that brought the message (the listener reads 32 KiB at a time: at most 32 KiB of
// PUBLISH packets, and the one packet up to mqtt.max_packet_size that the read
// completed), once per publisher until it drains.

// heldPublishers are the publishers held back and the full queues they wait for;
// guarded by pausedConns.mu. A client held has client.held set.
type heldPublishers struct {
	pubs   map[*session.Session]*heldPub   // by the publisher's session
	queues map[*session.Session]*fullQueue // by the session whose queue is full
	timer  *time.Timer                     // queue.max_pause: armed while queues is not empty
	armed  bool
	total  counter // publishers held, ever (bifrost_publishers_held_total)
}

// heldPub is a publisher held back.
type heldPub struct {
	cl     *client
	queues []*session.Session // the full queues it waits for
}

// fullQueue is a full queue that holds publishers back.
type fullQueue struct {
	pubs  []*session.Session // the publishers it holds
	since int64              // when the current max_pause window began, Unix ns
	at    int                // the messages it held when last seen grow: fewer is progress
}

// holder is the client whose PUBLISH is being routed (batch.hold) under when_full:
// backpressure: the session.Holder of its deliveries.
type holder struct {
	b  *Broker
	cl *client // nil: none, the message drops at a full queue
}

// Hold implements session.Holder: s's lock is held, and cl.mu (the PUBLISH is cl's).
func (h *holder) Hold(s *session.Session, queued int) bool { return h.b.hold(h.cl, s, queued) }

// hold holds cl back until s's queue, which holds queued messages, has drained; it
// reports false when it cannot (see the top of the file). cl.mu and s's lock are held.
func (b *Broker) hold(cl *client, s *session.Session, queued int) bool {
	pub := cl.s
	p, ok := cl.conn.(listener.Pauser)
	if !ok || cl.closing || pub == s {
		return false
	}
	ps := &b.paused
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h := &ps.held
	if _, held := h.pubs[s]; held {
		return false // s is not read: its queue would not drain while cl waits for it
	}
	r := h.pubs[pub]
	if r != nil && r.cl != cl { // the session's connection before a take-over
		b.forgetHeldLocked(pub, r)
		r = nil
	}
	if r == nil {
		if h.pubs == nil {
			h.pubs = make(map[*session.Session]*heldPub)
			h.queues = make(map[*session.Session]*fullQueue)
		}
		r = &heldPub{cl: cl}
		h.pubs[pub] = r
		cl.held = true
		p.PauseReads()
		h.total.Add(1)
	}
	q := h.queues[s]
	if q == nil {
		q = &fullQueue{since: now()}
		h.queues[s] = q
		b.armHoldLocked()
	}
	q.at = queued + 1 // with this message
	if !slices.Contains(r.queues, s) {
		r.queues = append(r.queues, s)
		q.pubs = append(q.pubs, pub)
	}
	return true
}

// queueDrained is Limits.Drained: s's queue no longer holds publishers back; those that
// waited for it alone are read again. s's lock is held.
func (b *Broker) queueDrained(s *session.Session) {
	ps := &b.paused
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h := &ps.held
	q := h.queues[s]
	if q == nil {
		return
	}
	delete(h.queues, s)
	for _, pub := range q.pubs {
		r := h.pubs[pub]
		if r == nil {
			continue
		}
		n := len(r.queues)
		r.queues = slices.DeleteFunc(r.queues, func(x *session.Session) bool { return x == s })
		if len(r.queues) == 0 && n > 0 {
			delete(h.pubs, pub)
			ps.resumeHeldLocked(r.cl)
		}
	}
}

// forgetHeldLocked forgets r, publisher pub's record, whose connection is closing (it is
// not resumed). ps.mu is held.
func (b *Broker) forgetHeldLocked(pub *session.Session, r *heldPub) {
	h := &b.paused.held
	for _, s := range r.queues {
		if q := h.queues[s]; q != nil {
			q.pubs = slices.DeleteFunc(q.pubs, func(x *session.Session) bool { return x == pub })
			if len(q.pubs) == 0 {
				delete(h.queues, s) // the queue stays marked: its drain finds nothing here
			}
		}
	}
	delete(h.pubs, pub)
	r.cl.held = false
}

// releaseHeld reads every held publisher again: when_full is no longer backpressure.
func (b *Broker) releaseHeld() {
	ps := &b.paused
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h := &ps.held
	for pub, r := range h.pubs {
		delete(h.pubs, pub)
		ps.resumeHeldLocked(r.cl)
	}
	clear(h.queues)
}

// Held returns the number of publishers held back by full queues.
func (b *Broker) Held() int {
	b.paused.mu.Lock()
	defer b.paused.mu.Unlock()
	return len(b.paused.held.pubs)
}

// armHoldLocked arms the max_pause timer for the oldest full queue, unless it is armed or
// none is left. ps.mu is held.
func (b *Broker) armHoldLocked() {
	h := &b.paused.held
	if h.armed || len(h.queues) == 0 {
		return
	}
	oldest := int64(0)
	for _, q := range h.queues {
		if oldest == 0 || q.since < oldest {
			oldest = q.since
		}
	}
	d := time.Duration(oldest + int64(b.live.limits.Load().maxPause) - now())
	if h.timer == nil {
		h.timer = time.AfterFunc(d, b.holdTimer)
	} else {
		h.timer.Reset(d)
	}
	h.armed = true
}

// holdTimer gives up the full queues whose clients took nothing from them for
// max_pause, and renews the window of those that took some (runs on its timer's
// goroutine).
func (b *Broker) holdTimer() {
	select {
	case <-b.done:
		return
	default:
	}
	ps := &b.paused
	h := &ps.held
	maxPause := int64(b.live.limits.Load().maxPause)
	ps.mu.Lock()
	h.armed = false
	t := now()
	var due []*session.Session
	for s, q := range h.queues {
		if t-q.since >= maxPause {
			due = append(due, s)
		}
	}
	ps.mu.Unlock()
	var stuck []*session.Session
	for _, s := range due {
		_, queued := s.Pending() // not under ps.mu: a session's lock comes first
		ps.mu.Lock()
		if q := h.queues[s]; q != nil {
			if queued < q.at {
				q.since, q.at = t, queued // it moves: slow, not stuck
			} else {
				stuck = append(stuck, s)
			}
		}
		ps.mu.Unlock()
	}
	for _, s := range stuck {
		if held := s.GiveUp(); held > 0 { // releases its publishers (queueDrained)
			b.drops.Log(b.log, slog.LevelWarn, "max_pause",
				"backpressure: a full queue took nothing for queue.max_pause; its publishers go on, and it drops until it drains",
				"client", s.ClientID(), "queued", held, "max_pause", time.Duration(maxPause).String())
		}
	}
	ps.mu.Lock()
	b.armHoldLocked()
	ps.mu.Unlock()
}

// stopHold stops the max_pause timer (Close).
func (b *Broker) stopHold() {
	ps := &b.paused
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if t := ps.held.timer; t != nil {
		t.Stop()
	}
}

// heldMetrics exports Held as bifrost_publishers_held and the publishers held ever as
// bifrost_publishers_held_total.
func (st *stats) heldMetrics(b *Broker) error {
	if st.m == nil {
		return nil
	}
	total := metrics.NewCounterVec("bifrost_publishers_held_total",
		"Times a publisher's reads were paused because its message found a subscriber's queue full (queue.when_full: backpressure).")
	b.paused.held.total.prom = total.WithLabelValues()
	if err := st.m.Register(total); err != nil {
		return err
	}
	return st.m.Register(metrics.NewGaugeFunc("bifrost_publishers_held",
		"Publishers whose reads are paused until the subscriber queues they filled drain to half (queue.when_full: backpressure).",
		func() float64 { return float64(b.Held()) }))
}
