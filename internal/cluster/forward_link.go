package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
)

// A fwdLink is the forwarding to one peer: its queue, what is in flight, and the
// goroutine that keeps one Forward stream to it, sending the queue in batches.
type fwdLink struct {
	f      *forwarder
	name   string
	id     pubsub.SubscriberID // the peer's id in the remote index
	wake   chan struct{}
	ctx    context.Context // cancelled by close
	stop   context.CancelFunc
	exited chan struct{} // closed when the link's goroutine has returned

	mu       sync.Mutex
	queue    []*outMsg // queue[head:] waits to be sent
	head     int
	qBytes   int
	inflight []*outMsg // sent and kept until acknowledged, in sequence order
	closed   bool

	msgs, bytes, drops, batches atomic.Uint64
	rtt                         atomic.Int64 // the last round trip of a batch, nanoseconds
}

func newFwdLink(f *forwarder, name string) *fwdLink {
	ctx, cancel := context.WithCancel(f.c.ctx)
	f.c.routes.rmu.Lock()
	id := f.c.routes.nodeIDLocked(name)
	f.c.routes.rmu.Unlock()
	return &fwdLink{f: f, name: name, id: id, wake: make(chan struct{}, 1), ctx: ctx, stop: cancel,
		exited: make(chan struct{})}
}

// push queues o with the forwarder's next sequence number, taken under the link's lock
// so that the queue is in sequence order; a QoS 0 message finds no room when the queue
// is full, and is counted as dropped.
func (l *fwdLink) push(o *outMsg) bool {
	l.mu.Lock()
	if l.closed || o.qos == 0 && (len(l.queue)-l.head >= fwdQueueMsgs || l.qBytes >= fwdQueueBytes) {
		l.mu.Unlock()
		l.drops.Add(1)
		return false
	}
	o.seq = l.f.seq.Add(1)
	l.queue = append(l.queue, o)
	l.qBytes += o.size()
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// depth is the number of messages queued or in flight.
func (l *fwdLink) depth() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue) - l.head + len(l.inflight)
}

// close stops the link and returns what it held, once its goroutine no longer reads it.
func (l *fwdLink) close() []*outMsg {
	l.stop()
	<-l.exited
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	out := append(l.inflight, l.queue[l.head:]...)
	l.inflight, l.queue, l.head, l.qBytes = nil, nil, 0, 0
	return out
}

// loop keeps a stream to the peer until the link closes.
func (l *fwdLink) loop(ctx context.Context) {
	defer close(l.exited)
	l.f.c.keepStream(ctx, l.ctx, l.name, "forward", l.stream)
}

// stream runs one Forward stream: what was in flight on the last one goes first, in
// order, then the queue, in batches, while a second goroutine reads the acknowledgements.
func (l *fwdLink) stream(ctx context.Context) error {
	c := l.f.c
	cl, err := c.liveClient(l.name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cl.Forward(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if len(l.inflight) > 0 { // the receiver skips what it delivered already
		rest := l.queue[l.head:]
		q := make([]*outMsg, 0, len(l.inflight)+len(rest))
		l.queue = append(append(q, l.inflight...), rest...)
		l.head = 0
		for _, o := range l.inflight {
			l.qBytes += o.size()
		}
		clear(l.inflight)
		l.inflight = l.inflight[:0]
	}
	l.mu.Unlock()
	acks := make(chan error, 1)
	var probe rttProbe
	if !c.spawn("cluster forward acks", func(context.Context) { acks <- l.readAcks(st, &probe) }) {
		return errClosed
	}
	b := &clusterpb.ForwardBatch{Node: c.cfg.NodeName, Epoch: c.routes.epoch}
	var frames []byte // the batch's frames, reused
	var sent []*outMsg
	for {
		l.mu.Lock()
		sent = sent[:0]
		size := 0
		for l.head < len(l.queue) && len(sent) < fwdBatchMsgs && size < fwdBatchBytes {
			o := l.queue[l.head]
			l.queue[l.head] = nil
			l.head++
			l.qBytes -= o.size()
			size += o.size()
			sent = append(sent, o)
			if o.keep() {
				l.inflight = append(l.inflight, o)
			}
		}
		if l.head == len(l.queue) {
			l.queue, l.head = l.queue[:0], 0
		} else if l.head >= 1024 && 2*l.head >= len(l.queue) {
			n := copy(l.queue, l.queue[l.head:])
			clear(l.queue[n:])
			l.queue, l.head = l.queue[:n], 0
		}
		l.mu.Unlock()
		if len(sent) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-acks:
				return err
			case <-l.wake:
			}
			continue
		}
		now := time.Now()
		frames = frames[:0]
		for _, o := range sent {
			var ms uint64
			if o.expiry != 0 {
				left := o.expiry - now.UnixNano()
				if left <= 0 && !o.keep() {
					continue // expired on the way: not sent
				}
				ms = uint64(max(left, int64(time.Millisecond)) / int64(time.Millisecond))
			}
			frames = appendFrame(frames, o, ms)
		}
		b.Frames = frames
		// Once sent, a kept message belongs to readAcks, which may free it at once: what
		// is done with the batch after Send is decided before.
		bytes := 0
		drop := sent[:0]
		for _, o := range sent {
			bytes += len(*o.buf)
			if !o.keep() {
				drop = append(drop, o)
			}
		}
		probe.start(sent[len(sent)-1].seq, now)
		err := st.Send(b) // encodes the batch before it returns
		b.Node, b.Epoch = "", 0
		l.msgs.Add(uint64(len(sent)))
		l.batches.Add(1)
		l.bytes.Add(uint64(bytes))
		for _, o := range drop {
			o.free()
		}
		clear(sent)
		if err != nil {
			return err
		}
	}
}

// rttProbe times one batch at a time from its send to its acknowledgement. The stream's
// goroutine starts a probe only while seq is 0 and the acknowledgements' goroutine ends it
// (seq back to 0), so that each hands the probe to the other with one atomic store and
// neither takes a lock: sent is written before seq and read after it.
type rttProbe struct {
	seq  atomic.Uint64 // the probed batch's last sequence; 0: none
	sent atomic.Int64  // when it was sent, since probeBase
}

// probeBase is the monotonic reading probes are timed from.
var probeBase = time.Now()

// start probes the batch ending at seq, sent at now, unless a probe is out.
func (p *rttProbe) start(seq uint64, now time.Time) {
	if p.seq.Load() == 0 {
		p.sent.Store(int64(now.Sub(probeBase)))
		p.seq.Store(seq)
	}
}

// done returns the round trip if ack covers the probed batch.
func (p *rttProbe) done(ack uint64) (time.Duration, bool) {
	if seq := p.seq.Load(); seq == 0 || ack < seq {
		return 0, false
	}
	d := time.Since(probeBase) - time.Duration(p.sent.Load())
	p.seq.Store(0)
	return d, true
}

// readAcks settles what the peer acknowledges until the stream ends.
func (l *fwdLink) readAcks(st clusterpb.Cluster_ForwardClient, probe *rttProbe) error {
	var done []*outMsg
	for {
		a, err := st.Recv()
		if err != nil {
			return err
		}
		if d, ok := probe.done(a.Seq); ok {
			l.rtt.Store(int64(d))
		}
		l.mu.Lock()
		n := 0
		for n < len(l.inflight) && l.inflight[n].seq <= a.Seq {
			n++
		}
		done = append(done[:0], l.inflight[:n]...)
		k := copy(l.inflight, l.inflight[n:])
		clear(l.inflight[k:])
		l.inflight = l.inflight[:k]
		l.mu.Unlock()
		none := a.NoneOnline
		for _, o := range done {
			delivered := true
			if o.share != "" {
				for _, s := range none {
					if s == o.seq {
						delivered = false
						break
					}
				}
			}
			l.f.settle(l, o, delivered)
		}
		clear(done)
	}
}
