package broker

import (
	"sync"
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Publish anywhere, receive anywhere: the broker's side.
//
// Routes. Every filter a local subscriber has ("$share/{group}/{filter}" for a shared
// one) is a route of this node, which the cluster streams to the peers. The index is the
// table: indexSubscribe tells the cluster of a filter's first local subscriber (AddRoute
// with first) and indexUnsubscribe of its last leaving (RemoveRoute), both under routeMu
// with the index's change, so that the cluster gets them in the index's order and keeps
// no count per filter; RoutedFilters gives it the whole set, for a peer's snapshot, under
// the same lock. SUBACK means routed: the SUBACK is encoded behind a session.Gate that
// opens once every live peer has acknowledged the routes of the SUBSCRIBE (a later
// subscriber waits for its filter's first one's), as a PUBACK waits for the store
// (persist.go): the poller goes on, the output waits.
//
// Forwarding. After local delivery, deliver hands the message to the cluster (Forward),
// which matches it against the peers' routes and queues it once per matching node. The
// broker keeps the publisher's session: for a QoS 1/2 PUBLISH from a client it hands the
// cluster a forwardHold's done, called once per node the message went to, and takes a
// Gate on the publisher before its PUBACK or PUBREC is encoded, which the last done
// opens: the acknowledgement waits for every peer that got the message.
//
// Shared subscriptions. A group with an online local member is served here (deliver); one
// without is left to the cluster, which gives the message to one node that has members
// (round robin; a node whose members are all offline answers none online and the next is
// tried), and when no peer has the group, its offline local member queues it now.
//
// Forwarded messages come in through an Inbound, a batch at a time, acknowledged once
// what persistent sessions keep of them is in the store: delivered to the local
// subscribers with the publisher's properties, never stored as retained here and never
// forwarded again.

// clusterScratch is the batch's part for the cluster, reused from message to message.
type clusterScratch struct {
	out       Outbound
	forwarded bool             // the batch delivers a message another node forwarded
	from      *session.Session // the client whose PUBLISH is routed: its acknowledgement waits
	held      *forwardHold     // the hold of the PUBLISH forwarded, for its acknowledgement
	unserved  []pubsub.Group   // local groups without an online member
}

// A forwardHold holds a QoS 1/2 PUBLISH's acknowledgement until every node Forward gave
// the message to has called done. left starts at forwardBias, so that no done reaches
// zero before Forward has said how many nodes there are; the broker then trades the bias
// for that number and one count of its own, which it releases once the Gate is taken
// with the acknowledgement (sendAck, in the same critical section as its encoding). Pooled
// with its done, a method value made once per hold: forwarding allocates nothing per
// message.
type forwardHold struct {
	left atomic.Int64
	gate session.Gate
	done func() // release
}

// forwardBias is more than any number of nodes.
const forwardBias = 1 << 40

var forwardHolds sync.Pool // *forwardHold

// getForwardHold returns a hold counting forwardBias.
func getForwardHold() *forwardHold {
	h, _ := forwardHolds.Get().(*forwardHold)
	if h == nil {
		h = new(forwardHold)
		h.done = h.release
	}
	h.left.Store(forwardBias)
	return h
}

// hold holds the acknowledgement just encoded behind g and releases the broker's own
// count: the gate opens here if every node has called done.
func (h *forwardHold) hold(g session.Gate) {
	h.gate = g
	h.release()
}

// release is one node's done; the last opens the gate and gives h back to the pool.
func (h *forwardHold) release() {
	if h.left.Add(-1) == 0 {
		h.gate.Open()
		h.gate = session.Gate{}
		forwardHolds.Put(h)
	}
}

// subscribeGate holds a SUBACK until every route its SUBSCRIBE added is acknowledged.
// left starts at one for the SUBSCRIBE itself, so the gate opens no earlier than the
// SUBACK is encoded.
type subscribeGate struct {
	left atomic.Int32
	gate session.Gate
}

func (g *subscribeGate) done() {
	if g.left.Add(-1) == 0 {
		g.gate.Open()
	}
}

// indexSubscribe is b.index.Subscribe (existed: sub replaced the options of the same
// subscriber's subscription), and on a node of a cluster it tells the cluster of a new
// subscription to filter; with g, the SUBACK being built waits for the route's
// acknowledgement. route is filter as a string the caller keeps anyway (the session's):
// the cluster's queues keep it while the change is in flight.
func (b *Broker) indexSubscribe(filter []byte, route string, sub pubsub.Sub, g *subscribeGate) (existed bool) {
	if b.cluster == nil {
		return b.index.Subscribe(filter, sub)
	}
	b.routeMu.Lock()
	defer b.routeMu.Unlock()
	first := !b.index.Subscribed(filter)
	if existed = b.index.Subscribe(filter, sub); existed || !first && g == nil {
		return existed
	}
	if g == nil {
		b.cluster.AddRoute(route, true, nil)
		return false
	}
	g.left.Add(1)
	if !b.cluster.AddRoute(route, first, g.done) {
		g.left.Add(-1)
	}
	return false
}

// indexUnsubscribe is b.index.Unsubscribe, and on a node of a cluster it tells the
// cluster when filter's last local subscription is gone.
func (b *Broker) indexUnsubscribe(filter []byte, id pubsub.SubscriberID) (removed bool) {
	if b.cluster == nil {
		return b.index.Unsubscribe(filter, id)
	}
	b.routeMu.Lock()
	defer b.routeMu.Unlock()
	if removed = b.index.Unsubscribe(filter, id); removed && !b.index.Subscribed(filter) {
		b.cluster.RemoveRoute(string(filter))
	}
	return removed
}

// RoutedFilters calls fn with every filter that has a local subscriber, each once, under
// routeMu: no route change reaches the cluster meanwhile, so the version of the cluster's
// table read in fn is the set's (package cluster's snapshot for a peer).
func (b *Broker) RoutedFilters(fn func(filters []string)) {
	b.routeMu.Lock()
	defer b.routeMu.Unlock()
	var out []string
	b.index.Walk(func(filter []byte, _ pubsub.Sub) bool {
		// A filter's subscribers come one after another.
		if n := len(out); n == 0 || out[n-1] != string(filter) {
			out = append(out, string(filter))
		}
		return true
	})
	fn(out)
}

// forward is deliver's last step on a node of a cluster: the message goes to the peers
// that route it, and the local shared groups without an online member go to a peer that
// has members, else to an offline member here.
func (b *Broker) forward(bt *batch, m *session.Message, nowNs int64) (n int, durable bool) {
	cs := &bt.cluster
	o := &cs.out
	o.Msg = m
	if m.QoS == 0 || cs.from == nil {
		n = b.cluster.Forward(o, nil)
	} else {
		h := getForwardHold()
		nodes := b.cluster.Forward(o, h.done)
		h.left.Add(int64(nodes) + 1 - forwardBias)
		if nodes > 0 {
			cs.held = h // sendAck takes the Gate as it encodes the PUBACK or PUBREC (hold)
		} else {
			h.release()
		}
		n = nodes
	}
	for _, g := range cs.unserved {
		if name := b.index.GroupName(g); name != "" && b.cluster.RemoteGroup(name) {
			continue // the cluster gave it to a peer's member
		}
		took, stored := b.deliverShared(bt, g, m, nowNs, 0)
		if took {
			n++
		}
		durable = durable || stored
	}
	clear(o.Served)
	o.Served, o.Msg = o.Served[:0], nil
	cs.unserved = cs.unserved[:0]
	return n, durable
}

// deliverSharedOnline gives m to an online member of g other than skip, and reports
// whether one took it.
func (b *Broker) deliverSharedOnline(bt *batch, g pubsub.Group, m *session.Message, nowNs int64, skip uint32) (took, stored bool) {
	sub, ok := b.pickOnline(g, skip)
	if !ok {
		return false, false
	}
	return b.deliverMember(bt, g, sub, m, nowNs)
}

// An Inbound delivers the messages of one batch another node forwarded, in one broker
// batch: the sessions they reach are written once, at End. One goroutine uses it.
type Inbound struct {
	b      *Broker
	bt     *batch
	stored bool // a persistent session's store keeps a message of the batch
}

// BeginForwarded starts delivering a batch of forwarded messages; End it.
func (b *Broker) BeginForwarded() *Inbound {
	bt := b.getBatch()
	bt.cluster.forwarded = true
	return &Inbound{b: b, bt: bt}
}

// Deliver delivers a message another node forwarded to this node's subscribers, and
// reports whether any took it. m may be borrowed (valid during the call). With share
// ("$share/{group}/{filter}"), only one member of that group gets it: an online one, or
// with offlineOK one whose persistent session queues it. Nothing here forwards it again or
// keeps it as retained.
func (in *Inbound) Deliver(m *session.Message, share string, offlineOK bool) bool {
	b, bt := in.b, in.bt
	if share == "" {
		n, stored := b.deliver(bt, m)
		in.stored = in.stored || stored
		return n > 0
	}
	g, ok := b.index.GroupOf([]byte(share))
	if !ok {
		return false
	}
	nowNs := now()
	pooled := false
	if m.QoS > 0 && m.Borrowed() {
		m, pooled = m.OwnPooled(), true
	}
	took, stored := b.deliverSharedOnline(bt, g, m, nowNs, 0)
	if !took && offlineOK {
		took, stored = b.deliverShared(bt, g, m, nowNs, 0)
	}
	in.stored = in.stored || stored
	if pooled {
		m.Release()
	}
	return took
}

// End writes what the batch's messages gave the sessions and, when a persistent
// session's store keeps one of them, returns once the store has it: the cluster then
// acknowledges the batch to its sender, whose publishers' PUBACKs wait for that, as a
// PUBACK on one node waits for its store (persist.go). It blocks the cluster's receiving
// goroutine, never a poller.
func (in *Inbound) End() {
	in.bt.cluster.forwarded = false
	in.b.endBatch(in.bt) // commits
	if in.stored && in.b.j != nil {
		in.b.j.WaitCommitted()
	}
	in.bt, in.stored = nil, false
}
