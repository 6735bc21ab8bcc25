package listener

import "sync"

// Drain notices: Conn.NotifyDrained and Drainer.OnDrained.
//
// A handler that holds messages back from a connection whose queue is long (so that a
// client that does not read cannot make the server queue everything it is sent) needs to
// hear when that queue has gone down to where it may write again (Options.DrainedAt;
// by default, empty), or the messages would wait for ever. The event is in written, which
// the engine calls as the socket takes queued bytes (a poller, or on the portable engine
// the connection's write goroutine); but that runs with the connection's write lock held,
// where a handler that writes would deadlock. So the notice is handed to a goroutine of
// the Server's.
//
// Cost: one bit of the connection's state says a notice is wanted (NotifyDrained sets it,
// written or NotifyDrained itself clears it and queues the connection, whichever sees the
// queue at most DrainedAt first), and one goroutine delivers every connection's notices, started when
// the first is queued and ending when none is left. So nothing is parked per connection,
// and an idle server runs no goroutine for this.
//
// Why it cannot be lost: NotifyDrained sets the bit, then loads pending; written
// subtracts from pending, then loads the bit. Both are sequentially consistent atomics,
// so at least one of them sees the other's write and queues the notice; the CAS that
// clears the bit lets only one of them do it.
//
// Alternatives rejected: a goroutine per waiting connection (the cost the listener exists
// to avoid); delivering from the timing wheel's tick (a slow consumer would stall up to a
// tick, 250 ms, every time its queue drains); a notice only once the queue is empty
// (other writes can keep it from ever emptying: a slow consumer's QoS 0, which the broker
// writes up to its threshold, kept its QoS 1 waiting as long as QoS 0 came,
// TestSlowConsumer).

// drainer is the part of Server that delivers the notices.
type drainer struct {
	mu      sync.Mutex
	queue   []*conn // connections whose notice is due, in order
	running bool    // the delivering goroutine runs
	closed  bool    // the Server is closing: no goroutine starts any more
}

// NotifyDrained implements Conn.
func (c *conn) NotifyDrained() {
	if c.l.srv.onDrained == nil {
		return
	}
	for {
		st := c.state.Load()
		if st&(stWantDrain|stShutdown|stClosing|stClosed) != 0 {
			return // asked already, or nothing will be written any more
		}
		if c.state.CompareAndSwap(st, st|stWantDrain) {
			break
		}
	}
	if c.pending.Load() <= int64(c.l.srv.o.DrainedAt) {
		c.drained()
	}
}

// drained queues the notice that a NotifyDrained asked for, unless another caller has.
func (c *conn) drained() {
	for {
		st := c.state.Load()
		if st&stWantDrain == 0 {
			return
		}
		if c.state.CompareAndSwap(st, st&^stWantDrain) {
			break
		}
	}
	c.l.srv.queueDrained(c)
}

// queueDrained queues c's notice, starting the delivering goroutine if it is not running.
func (s *Server) queueDrained(c *conn) {
	d := &s.drain
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.queue = append(d.queue, c)
	start := !d.running
	d.running = true
	d.mu.Unlock()
	if start {
		s.goroutine("drain notices", s.deliverDrained)
	}
}

// deliverDrained delivers the queued notices, in batches, until none is left.
func (s *Server) deliverDrained() {
	d := &s.drain
	var batch []*conn
	for {
		d.mu.Lock()
		if len(d.queue) == 0 || d.closed {
			d.running = false
			clear(d.queue)
			d.queue = d.queue[:0]
			if cap(d.queue) > 1024 {
				d.queue = nil // let a storm's backing array go
			}
			d.mu.Unlock()
			return
		}
		batch, d.queue = d.queue, batch[:0]
		d.mu.Unlock()
		for i, c := range batch {
			batch[i] = nil
			if c.state.Load()&(stShutdown|stClosing|stClosed) == 0 {
				c.notifyDrained()
			}
		}
	}
}

// notifyDrained calls OnDrained for c; a panic closes c, as in the other handler calls.
func (c *conn) notifyDrained() {
	defer c.recoverHandler("OnDrained")
	c.l.srv.onDrained.OnDrained(c)
}

// closeDrain stops notices: none is queued and no goroutine starts after it returns.
func (s *Server) closeDrain() {
	s.drain.mu.Lock()
	s.drain.closed = true
	s.drain.mu.Unlock()
}
