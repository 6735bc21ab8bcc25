package cluster

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Forwarding: a PUBLISH crosses to each node whose routes match it, once.
//
// Forward matches the topic in the remote index (routes.go) and queues one copy of the
// message (a pooled buffer) for each matching node's link: one goroutine and one Forward
// stream per peer, batched (forward_link.go). Each message gets the link's next sequence
// number; the order of the queue is the order of the stream, so the order per publisher
// and topic holds. A node id of the remote index finds its link in byID, a table indexed
// by id that is replaced, never changed, when a link starts or ends: a message takes no
// lock to find its links but each link's own (its queue).
//
// QoS 0 is dropped, and counted, when the peer's queue is full (fwdQueueMsgs or
// fwdQueueBytes). QoS 1 and 2 are never dropped: the message stays queued, then in flight,
// until the peer acknowledges it, and resent in order after a reconnect. Each copy carries
// the done the broker passed to Forward, called once when the copy is settled: the peer
// acknowledged it, the link gave it up (the peer was declared dead: its subscribers are
// gone with it), or a shared message found no member anywhere. The broker counts them and
// holds the publisher's PUBACK or PUBREC until the last (broker/cluster_routes.go); the
// publisher's session is the broker's, never touched here. The queue is thus bounded by
// the publishers' windows (their Receive Maximum), not by a count that would have to
// drop: a full peer slows its publishers.
//
// The receiver de-duplicates by (origin, incarnation, sequence), so a message resent
// after a reconnect is delivered once: QoS 2 stays exactly once end to end. The last
// sequence seen from an origin (seenSeq) belongs to one stream, the newest: a stream
// takes it over when it starts, after the batch an older stream of that origin may be in
// (delivering it, then waiting for the store), and an older stream that finds it taken
// delivers nothing more: its sender has moved to the new one. So two streams of one
// origin never deliver at once (the order holds across a reconnect), and a batch is
// acknowledged only once the store has what persistent sessions keep of it and of the
// batches before it. The owner finds that it still owns the state with atomics and holds
// no lock across delivery and the store's commit; the alternative, a mutex per origin
// held over each batch, costs a lock per batch to exclude a second stream that exists
// only at a reconnect, and puts the wait for the disk under a lock.
//
// Shared groups: the message goes to one node with members (round robin over the remote
// index's group of nodes); a node whose members are all offline answers none online, and
// the next one is tried; when every node did, an offline member's persistent session takes
// it, here if the group has members here, else on a peer (offline_ok).

// Bounds of a peer's queue, with their reasons.
const (
	// fwdQueueMsgs and fwdQueueBytes bound the QoS 0 messages queued for one peer: a few
	// hundred milliseconds of a fast stream; beyond, QoS 0 is dropped.
	fwdQueueMsgs  = 8192
	fwdQueueBytes = 16 << 20
	// fwdBatchMsgs and fwdBatchBytes bound one batch on the stream.
	fwdBatchMsgs  = 512
	fwdBatchBytes = 256 << 10
)

// outMsg is one message queued for one peer.
type outMsg struct {
	buf       *[]byte // topic, payload, properties
	done      func()  // Forward's done, called once when the message is settled; nil: none
	share     string  // "$share/{group}/{filter}": one member of that group
	tried     []pubsub.SubscriberID
	seq       uint64
	expiry    int64 // Unix nanoseconds; 0: none
	tl, pl    int
	qos       uint8
	retain    bool
	offlineOK bool
}

func (o *outMsg) topic() []byte   { return (*o.buf)[:o.tl] }
func (o *outMsg) payload() []byte { return (*o.buf)[o.tl : o.tl+o.pl] }
func (o *outMsg) props() []byte   { return (*o.buf)[o.tl+o.pl:] }
func (o *outMsg) size() int       { return len(*o.buf) + 64 }

// keep reports whether the message stays in flight until the peer acknowledges it.
func (o *outMsg) keep() bool { return o.qos > 0 || o.share != "" }

var outMsgs = sync.Pool{New: func() any { return new(outMsg) }}

// newOutMsg copies m for one peer.
func newOutMsg(m *session.Message) *outMsg {
	o := outMsgs.Get().(*outMsg)
	t, p, pr := m.Topic(), m.Payload(), m.Props()
	o.buf = bufpool.Get(len(t) + len(p) + len(pr))
	*o.buf = append(append(append((*o.buf)[:0], t...), p...), pr...)
	o.tl, o.pl = len(t), len(p)
	o.qos, o.retain, o.expiry = m.QoS, m.Retain, m.Expiry
	return o
}

// free gives o back to the pools.
func (o *outMsg) free() {
	bufpool.Put(o.buf)
	clear(o.tried)
	*o = outMsg{tried: o.tried[:0]}
	outMsgs.Put(o)
}

// forwarder is the node's forwarding: a link per peer, and what it received.
type forwarder struct {
	c *Cluster

	mu    sync.Mutex
	links map[string]*fwdLink // by peer name
	// byID is links by node id (routes.nodeIDLocked), a copy replaced under mu: Forward
	// reads it without a lock.
	byID atomic.Pointer[[]*fwdLink]
	// seq numbers the messages of every link, in each link's order: a link made again
	// for a peer declared dead and back goes on past the old link's numbers, which the
	// peer, if it never declared this node dead, still de-duplicates against.
	seq atomic.Uint64

	scratch sync.Pool // *matchScratch

	smu     sync.Mutex
	seen    map[string]*seenSeq // by origin node
	streams atomic.Uint64       // numbers the Forward streams served, for seenSeq.owner
	// dropped counts messages no one took: a shared message no member anywhere took.
	dropped atomic.Uint64
	// resent counts messages received again after a reconnect, and not delivered again.
	resent atomic.Uint64
}

// seenSeq is what the streams of one peer delivered: the last sequence of its
// incarnation epoch. It belongs to the newest stream (owner); epoch and last are read and
// written only by a stream counted in active that found itself the owner (begin).
type seenSeq struct {
	owner  atomic.Uint64 // the stream that delivers; an older one delivers nothing more
	active atomic.Int32  // streams between begin and end: one, but at a takeover
	mu     sync.Mutex    // for idle
	idle   sync.Cond     // a stream ended a batch that a new owner may wait for
	epoch  uint64
	last   uint64
}

func newSeenSeq() *seenSeq {
	sn := &seenSeq{}
	sn.idle.L = &sn.mu
	return sn
}

// takeOver makes stream me the owner and returns once no older stream is in a batch:
// the state is then me's alone.
func (sn *seenSeq) takeOver(me uint64) {
	sn.owner.Store(me)
	if sn.active.Load() == 0 {
		return
	}
	sn.mu.Lock()
	for sn.active.Load() != 0 {
		sn.idle.Wait()
	}
	sn.mu.Unlock()
}

// begin starts a batch of stream me, and reports false, the batch not begun, when a
// newer stream owns the state. An owner's begin and a newer stream's takeOver each write
// one atomic and read the other's, so at least one sees the other: either the batch
// stops here, or takeOver waits for its end.
func (sn *seenSeq) begin(me uint64) bool {
	sn.active.Add(1)
	if sn.owner.Load() == me {
		return true
	}
	sn.end(me)
	return false
}

// end ends a batch of stream me, waking a newer owner that waits for it.
func (sn *seenSeq) end(me uint64) {
	if sn.active.Add(-1) == 0 && sn.owner.Load() != me {
		sn.mu.Lock()
		sn.idle.Broadcast()
		sn.mu.Unlock()
	}
}

// matchScratch is one Forward call's reusable state.
type matchScratch struct {
	m      pubsub.Matches
	nodes  []pubsub.SubscriberID
	shares []shareTarget
}

type shareTarget struct {
	node pubsub.SubscriberID
	name string
}

func newForwarder(c *Cluster) *forwarder {
	f := &forwarder{c: c, links: map[string]*fwdLink{}, seen: map[string]*seenSeq{}}
	f.scratch.New = func() any { return new(matchScratch) }
	return f
}

// link returns the link to peer name, starting it on first use.
func (f *forwarder) link(name string) *fwdLink {
	f.mu.Lock()
	l := f.links[name]
	if l == nil {
		l = newFwdLink(f, name)
		f.links[name] = l
		f.setByIDLocked(l.id, l)
		f.mu.Unlock()
		if !f.c.spawn("cluster forward", l.loop) {
			close(l.exited) // closing: nothing is queued on a link that never runs
			l.mu.Lock()
			l.closed = true
			l.mu.Unlock()
		}
		return l
	}
	f.mu.Unlock()
	return l
}

// setByIDLocked makes l the link of node id in a new byID (nil: none). f.mu is held.
func (f *forwarder) setByIDLocked(id pubsub.SubscriberID, l *fwdLink) {
	var old []*fwdLink
	if t := f.byID.Load(); t != nil {
		old = *t
	}
	t := make([]*fwdLink, max(len(old), int(id)+1))
	copy(t, old)
	t[id] = l
	f.byID.Store(&t)
}

// linkByID returns the running link to node id; nil when there is none.
func (f *forwarder) linkByID(id pubsub.SubscriberID) *fwdLink {
	if t := f.byID.Load(); t != nil && int(id) < len(*t) {
		return (*t)[id]
	}
	return nil
}

// linkOf returns the running link to peer name; nil when there is none.
func (f *forwarder) linkOf(name string) *fwdLink {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.links[name]
}

// names returns the peers with a link.
func (f *forwarder) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.links))
	for name := range f.links {
		out = append(out, name)
	}
	return out
}

// gone ends the link to a peer that failed or left: what waited for it is released, and
// its shared messages go to another node.
func (f *forwarder) gone(name string) {
	f.mu.Lock()
	l := f.links[name]
	delete(f.links, name)
	if l != nil {
		f.setByIDLocked(l.id, nil)
	}
	f.mu.Unlock()
	if l == nil {
		return
	}
	for _, o := range l.close() {
		f.settle(l, o, false)
	}
}

// Forward is broker.ClusterRoutes'.
func (f *forwarder) Forward(o *broker.Outbound, done func()) int {
	r := f.c.routes
	m := o.Msg
	sc := f.scratch.Get().(*matchScratch)
	defer f.scratch.Put(sc)
	sc.nodes = r.matchNodes(m.Topic(), &sc.m, sc.nodes[:0])
	if len(sc.nodes) == 0 && len(sc.m.Groups) == 0 {
		return 0
	}
	sc.shares = sc.shares[:0]
	for _, g := range sc.m.Groups {
		name := r.remote.GroupName(g)
		if name == "" || slices.Contains(o.Served, name) {
			continue
		}
		if s, ok := r.remote.Pick(g, func(pubsub.Sub) bool { return true }); ok {
			sc.shares = append(sc.shares, shareTarget{node: s.Subscriber, name: name})
		}
	}
	n := 0
	for _, id := range sc.nodes {
		if f.push(id, m, "", done) {
			n++
		}
	}
	for _, t := range sc.shares {
		if f.push(t.node, m, t.name, done) {
			n++
		}
	}
	return n
}

// forwardShared queues m for one node with members of group share.
func (f *forwarder) forwardShared(m *session.Message, share string) bool {
	r := f.c.routes
	g, ok := r.remote.GroupOf([]byte(share))
	if !ok {
		return false
	}
	s, ok := r.remote.Pick(g, func(pubsub.Sub) bool { return true })
	return ok && f.push(s.Subscriber, m, share, nil)
}

// push queues a copy of m for node id, settled with done, and reports whether the link
// took it (done is then called once, else never). The link is started if need be: a
// peer's routes may reach this node before the routes goroutine has seen the peer alive.
func (f *forwarder) push(id pubsub.SubscriberID, m *session.Message, share string, done func()) bool {
	l := f.linkByID(id)
	if l == nil {
		name := f.c.routes.nodeName(id)
		if name == "" {
			return false
		}
		l = f.link(name)
	}
	o := newOutMsg(m)
	o.share, o.done = share, done
	if !l.push(o) {
		o.free()
		return false
	}
	return true
}

// settle ends a message the peer of l acknowledged (noneOnline: a shared message no
// member there took), or that l gave up (the peer is gone).
func (f *forwarder) settle(l *fwdLink, o *outMsg, delivered bool) {
	if o.share == "" || delivered {
		if o.done != nil {
			o.done()
		}
		o.free()
		return
	}
	o.tried = append(o.tried, l.id)
	if f.reshare(o) {
		return
	}
	if o.done != nil {
		o.done()
	}
	o.free()
}

// reshare gives a shared message no member took on the nodes tried to the next node of
// its group, else to an offline member, and reports whether it was queued again (it then
// belongs to another link).
func (f *forwarder) reshare(o *outMsg) bool {
	r := f.c.routes
	g, ok := r.remote.GroupOf([]byte(o.share))
	for ok && !o.offlineOK {
		// Pick's accept runs under the remote index's lock: it must not take f.mu
		// (f.mu is taken before rmu, and apply holds rmu while it changes the index), so
		// the link is looked for after.
		s, found := r.remote.Pick(g, func(s pubsub.Sub) bool { return !slices.Contains(o.tried, s.Subscriber) })
		if !found {
			break
		}
		if f.requeue(s.Subscriber, o) {
			return true
		}
		o.tried = append(o.tried, s.Subscriber)
	}
	if !o.offlineOK {
		// Every node answered none online: an offline member's session queues it, here
		// first.
		if in := f.c.beginForwarded(); in != nil {
			var m session.Message
			m.BorrowForwarded(o.topic(), o.payload(), o.props(), o.qos, o.retain, o.expiry)
			took := in.Deliver(&m, o.share, true)
			in.End()
			if took {
				return false
			}
		}
		o.offlineOK = true
		if ok {
			for _, id := range o.tried {
				if f.requeue(id, o) {
					return true
				}
			}
		}
	}
	f.dropped.Add(1)
	return false
}

// requeue queues o, which no link holds, on node id's link.
func (f *forwarder) requeue(id pubsub.SubscriberID, o *outMsg) bool {
	l := f.linkByID(id)
	return l != nil && l.push(o)
}

// Forward serves a peer's forwarding stream: each message delivered here once, in order,
// acknowledged batch by batch.
func (s rpcServer) Forward(st clusterpb.Cluster_ForwardServer) error {
	f := s.c.fwd
	b, err := st.Recv()
	if err != nil {
		return err
	}
	name, epoch := b.Node, b.Epoch
	if _, ok := s.c.ms.lookup(name); !ok || name == s.c.cfg.NodeName {
		return status.Errorf(codes.Unavailable, "cluster: %q is not a live member here", name)
	}
	f.smu.Lock()
	sn := f.seen[name]
	if sn == nil {
		sn = newSeenSeq()
		f.seen[name] = sn
	}
	f.smu.Unlock()
	me := f.streams.Add(1)
	sn.takeOver(me)
	var m session.Message
	var none []uint64
	for {
		if !sn.begin(me) {
			return status.Errorf(codes.Aborted, "cluster: a newer forwarding stream from %q", name)
		}
		last, err := f.deliverBatch(sn, epoch, b.Frames, &m, &none)
		sn.end(me)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := st.Send(&clusterpb.ForwardAck{Seq: last, NoneOnline: none}); err != nil {
			return err
		}
		if b, err = st.Recv(); err != nil {
			return nil
		}
	}
}

// deliverBatch delivers the frames of one batch of peer epoch's stream that sn has not
// seen, and returns, once the store has what persistent sessions keep of them, the last
// sequence seen; none gets the shared messages no member here took. The stream is
// between sn.begin and sn.end: sn's state is its own.
func (f *forwarder) deliverBatch(sn *seenSeq, epoch uint64, frames []byte, m *session.Message, none *[]uint64) (last uint64, err error) {
	*none = (*none)[:0]
	if sn.epoch != epoch { // a new incarnation of the peer numbers from 1 again
		sn.epoch, sn.last = epoch, 0
	}
	in := f.c.beginForwarded()
	now := time.Now().UnixNano()
	var x frame
	for rest := frames; len(rest) > 0; {
		if rest, err = readFrame(rest, &x); err != nil {
			break
		}
		if x.seq <= sn.last {
			f.resent.Add(1)
			continue // delivered before a reconnect
		}
		var exp int64
		if x.expiryMS > 0 {
			exp = now + int64(x.expiryMS)*int64(time.Millisecond)
		}
		took := false
		if in != nil {
			m.BorrowForwarded(x.topic, x.payload, x.props, x.qos, x.retain, exp)
			took = in.Deliver(m, string(x.share), x.offlineOK)
		}
		if len(x.share) > 0 && !took {
			*none = append(*none, x.seq)
		}
		sn.last = x.seq
	}
	if in != nil {
		in.End()
	}
	return sn.last, err
}
