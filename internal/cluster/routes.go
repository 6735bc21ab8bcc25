package cluster

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
)

// Routes: which node wants which messages.
//
// Each node owns its routes, the filters its local subscribers have
// ("$share/{group}/{filter}" for a shared one). The broker's index is the table: the
// broker tells a filter's first local subscriber (AddRoute, first) and its last leaving
// (RemoveRoute) in its index's order, and lists the routed filters for a snapshot
// (RoutedFilters, host.go), so that this side keeps no entry per route, only the changes
// in flight. Every change gets the next version. To each live peer a link
// (routes_stream.go) streams the table: a snapshot with its version on connect, then the
// deltas; the peer acknowledges each version once its remote index has it.
//
// The remote index is a pubsub.Index whose subscribers are node ids: matching a topic
// there names each node with a matching route once, however many of its clients
// subscribe (forward.go). It holds the peers' wildcard and shared filters; their exact
// ones, most routes, are sets of hashes beside it (routes_exact.go). A peer memberlist
// declares dead or gone has its routes dropped at once (gone); it sends a snapshot when
// it comes back.
//
// SUBACK means routed: AddRoute returns the version that added the filter (or, once
// every live peer has it, a later version they all had: the table keeps a version only
// for routes in flight), and the caller waits until every live peer has acknowledged it,
// and, on a node that has just started, until it has tried its seeds (knowsPeers):
// before, it knows no peer to wait for. A peer that does not answer holds the wait only
// until failure detection declares it dead; routeAckTimeout bounds the rest (a peer
// alive in gossip whose rpc port refuses us) and is counted.

const (
	// routeAckTimeout bounds a SUBACK's wait for a peer that gossip says is alive.
	routeAckTimeout = 10 * time.Second
	// routeDeltaMax is the most deltas kept for a peer whose stream lags: past it, the
	// peer gets a snapshot instead.
	routeDeltaMax = 1 << 16
	// linkCheck is how often the link set is compared with the live members; a member's
	// failure drops its routes at once (gone), not on this tick.
	linkCheck = 250 * time.Millisecond
)

// A routeWaiter is a SUBACK waiting for version to reach every live peer.
type routeWaiter struct {
	version  uint64
	deadline time.Time
	done     func()
}

// routes is the node's route state: its own table, the links that stream it, and the
// peers' tables in the remote index.
type routes struct {
	c     *Cluster
	epoch uint64 // this incarnation: peers de-duplicate forwarded messages by it

	mu      sync.Mutex // guards the fields below; never held while calling out
	count   int        // routed filters
	version uint64
	// fresh holds the version that added each filter added after floor: a later
	// subscriber to one waits for it. Every routed filter not in fresh was added at or
	// before floor, which every live peer had acknowledged when it was set (settle), so a
	// version per route is kept only while it is in flight.
	fresh    map[string]uint64
	floor    uint64
	links    map[string]*routeLink // by peer name
	waiters  []routeWaiter         // in version order
	timeouts uint64

	rmu    sync.Mutex // guards the peers' tables; the index and exact have their own locks
	remote *pubsub.Index
	exact  *exactRoutes
	ids    map[string]pubsub.SubscriberID // node name → its id in the remote index
	names  []string                       // id → node name
	peers  map[string]*peerTable
	// dropping holds the node ids of peers gone whose routes drop takes out.
	dropping []pubsub.SubscriberID

	wake chan struct{} // a peer is gone: sync the links now
}

// peerTable is the state of one peer's routes. The routes themselves are only in the
// remote index (its subscriptions of the peer's node id) and its exact set: a set of
// filters per peer beside them would double the memory of a remote route for what only
// a snapshot and a departure need, which walk the index and replace the exact set.
type peerTable struct {
	id      pubsub.SubscriberID
	stream  uint64 // the stream that owns the table; a newer one or gone() replaces it
	end     func() // ends that stream, so that the peer dials again and sends a snapshot
	count   int    // routes in the remote index
	version uint64
}

func newRoutes(c *Cluster) *routes {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &routes{c: c, epoch: binary.LittleEndian.Uint64(b[:]) | 1,
		fresh: map[string]uint64{}, links: map[string]*routeLink{},
		remote: pubsub.NewIndex(), exact: newExactRoutes(), ids: map[string]pubsub.SubscriberID{}, names: []string{""},
		peers: map[string]*peerTable{}, wake: make(chan struct{}, 1)}
}

// add takes a local subscription to filter, its first (first: filter becomes a route)
// or a later one, and returns the version that added filter, or a later one, queueing
// the change for every link when it is new.
func (r *routes) add(filter string, first bool) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !first {
		if v, ok := r.fresh[filter]; ok {
			return v
		}
		return r.floor
	}
	r.count++
	r.version++
	r.fresh[filter] = r.version
	for _, l := range r.links {
		l.queueLocked(filter, false, r.version)
	}
	return r.version
}

// remove takes filter's last local subscription leaving: it is no route any more.
func (r *routes) remove(filter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count--
	delete(r.fresh, filter)
	r.version++
	for _, l := range r.links {
		l.queueLocked(filter, true, r.version)
	}
}

// raiseFloorLocked forgets the versions of the filters every live peer has
// acknowledged. r.mu is held.
func (r *routes) raiseFloorLocked(live []string) {
	floor := r.version
	for _, name := range live {
		l := r.links[name]
		if l == nil {
			return
		}
		floor = min(floor, l.acked)
	}
	if floor <= r.floor {
		return
	}
	if floor >= r.version {
		r.fresh = map[string]uint64{} // a map keeps its size: a burst's would stay
	}
	for f, v := range r.fresh {
		if v <= floor {
			delete(r.fresh, f)
		}
	}
	r.floor = floor
}

// wait calls done once every live peer has acknowledged version, and reports false
// (without calling done) if they all have already.
func (r *routes) wait(version uint64, done func()) bool {
	live := r.c.livePeers()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.knowsPeers() && r.ackedLocked(version, live) {
		return false
	}
	r.waiters = append(r.waiters, routeWaiter{version: version, deadline: time.Now().Add(routeAckTimeout), done: done})
	return true
}

// ackedLocked reports whether every peer of live has acknowledged version.
func (r *routes) ackedLocked(version uint64, live []string) bool {
	for _, name := range live {
		l := r.links[name]
		if l == nil || l.acked < version {
			return false
		}
	}
	return true
}

// laggingLocked names the live peers that have not acknowledged version.
func (r *routes) laggingLocked(version uint64, live []string) []string {
	var out []string
	for _, name := range live {
		if l := r.links[name]; l == nil || l.acked < version {
			out = append(out, name)
		}
	}
	return out
}

// settle calls the waiters whose version every live peer has acknowledged, and those
// past their deadline.
func (r *routes) settle() {
	live := r.c.livePeers()
	known := r.c.knowsPeers()
	now := time.Now()
	var ready []func()
	r.mu.Lock()
	keep := r.waiters[:0]
	for _, w := range r.waiters {
		switch {
		case known && r.ackedLocked(w.version, live):
			ready = append(ready, w.done)
		case now.After(w.deadline):
			r.timeouts++
			ready = append(ready, w.done)
			r.c.log.Warn("cluster: a SUBACK goes without every live peer's acknowledgement of its routes",
				"version", w.version, "waited", routeAckTimeout, "lagging", r.laggingLocked(w.version, live))
		default:
			keep = append(keep, w)
		}
	}
	clear(r.waiters[len(keep):])
	r.waiters = keep
	if known {
		r.raiseFloorLocked(live)
	}
	r.mu.Unlock()
	for _, f := range ready {
		f()
	}
}

// snapshot returns the whole table, from the broker (none before it is connected), and
// its version; locked, if not nil, runs under r.mu with them. The broker lists its
// filters while no change reaches add or remove, so the version read meanwhile is the
// list's.
func (r *routes) snapshot(locked func()) (filters []string, version uint64) {
	take := func(fs []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		filters, version = fs, r.version
		if locked != nil {
			locked()
		}
	}
	r.c.routedFilters(take)
	return filters, version
}

// resnap has every link send its snapshot again.
func (r *routes) resnap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.links {
		clear(l.pending)
		l.pending, l.resnap = nil, true
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// nodeIDLocked returns name's id in the remote index, giving it one on first use. rmu is held.
func (r *routes) nodeIDLocked(name string) pubsub.SubscriberID {
	if id, ok := r.ids[name]; ok {
		return id
	}
	id := pubsub.SubscriberID(len(r.names))
	r.ids[name] = id
	r.names = append(r.names, name)
	return id
}

// nodeName returns the name of a node id of the remote index.
func (r *routes) nodeName(id pubsub.SubscriberID) string {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if int(id) < len(r.names) {
		return r.names[id]
	}
	return ""
}

// apply brings peer name's table, as stream delivers it, into the remote index: the
// whole of it for a snapshot, else the delta. It reports false when the stream no
// longer owns the table (the peer was declared gone, or a newer stream took over).
func (r *routes) apply(name string, stream uint64, snapshot bool, add, remove []string, version uint64) bool {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	pt := r.peers[name]
	if pt == nil || pt.stream != stream {
		return false
	}
	sub := pubsub.Sub{Subscriber: pt.id, QoS: 2}
	if snapshot {
		keep := make(map[string]struct{}, len(add))
		for _, f := range add {
			if !exactFilter(f) {
				keep[f] = struct{}{}
			}
		}
		for _, f := range r.filtersOf(pt.id) {
			if _, ok := keep[f]; !ok {
				r.remote.Unsubscribe([]byte(f), pt.id)
			}
		}
		r.exact.reset(pt.id)
	}
	for _, f := range add {
		if exactFilter(f) {
			r.exact.add(pt.id, f)
			pt.count++
		} else if !r.remote.Subscribe([]byte(f), sub) {
			pt.count++
		}
	}
	if snapshot {
		pt.count = len(add) // distinct: a table's filters; any left from before that it holds are counted once
	}
	for _, f := range remove {
		var had bool
		if exactFilter(f) {
			had = r.exact.remove(pt.id, f)
		} else {
			had = r.remote.Unsubscribe([]byte(f), pt.id)
		}
		if had {
			pt.count--
		}
	}
	pt.version = version
	return true
}

// own makes stream the owner of peer name's table, which it replaces with a snapshot;
// end ends the stream. The stream it replaces is ended.
func (r *routes) own(name string, stream uint64, end func()) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	pt := r.peers[name]
	if pt == nil {
		pt = &peerTable{id: r.nodeIDLocked(name)}
		r.peers[name] = pt
	} else if pt.end != nil {
		pt.end()
	}
	pt.stream, pt.end = stream, end
}

// gone drops the routes of a peer that failed or left, and has the routes goroutine
// stop the links to it. Its stream to this node is ended too: the peer may not have
// declared this node gone (a partition healed before its own failure detection did, or
// a death gossiped to nodes that could reach it all along), and its link, which
// otherwise would only send the next change, dials again and starts with a snapshot.
// It runs in memberlist's event delegate, under memberlist's lock, so it must neither
// call memberlist nor take long: the peer's table stops taking updates here, and the
// routes goroutine takes its routes out of the index at once (drop), before it looks at
// anything else.
func (r *routes) gone(name string) {
	r.rmu.Lock()
	if pt := r.peers[name]; pt != nil {
		delete(r.peers, name)
		r.dropping = append(r.dropping, pt.id)
		if pt.end != nil {
			pt.end()
		}
	}
	r.rmu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// drop takes the routes of the peers gone out of the remote index. A peer that came back
// meanwhile keeps the routes of its new stream: they are applied after this, under rmu.
func (r *routes) drop() {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	for _, id := range r.dropping {
		back := false
		for _, pt := range r.peers {
			back = back || pt.id == id
		}
		if back {
			continue // its new snapshot replaced the table
		}
		for _, f := range r.filtersOf(id) {
			r.remote.Unsubscribe([]byte(f), id)
		}
		r.exact.drop(id)
	}
	r.dropping = r.dropping[:0]
}

// matchNodes appends the nodes whose routes match topic to nodes, each once, and leaves
// the shared groups that match in m.
func (r *routes) matchNodes(topic []byte, m *pubsub.Matches, nodes []pubsub.SubscriberID) []pubsub.SubscriberID {
	m.Reset()
	r.remote.Match(topic, m)
	for _, s := range m.Subs {
		nodes = append(nodes, s.Subscriber)
	}
	nodes = r.exact.match(topic, nodes)
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// filtersOf returns the filters of node id in the remote index (its wildcard and shared
// ones). rmu is held.
func (r *routes) filtersOf(id pubsub.SubscriberID) []string {
	var out []string
	r.remote.Walk(func(filter []byte, s pubsub.Sub) bool {
		if s.Subscriber == id {
			out = append(out, string(filter))
		}
		return true
	})
	return out
}

// peerRoutes returns how many routes each peer has in the remote index.
func (r *routes) peerRoutes() map[string]int {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	out := make(map[string]int, len(r.peers))
	for name, pt := range r.peers {
		out[name] = pt.count
	}
	return out
}

// localRoutes returns how many filters this node routes.
func (r *routes) localRoutes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// run keeps a link to each live peer and expires waits, until done is closed.
func (r *routes) run(done <-chan struct{}) {
	tick := time.NewTicker(linkCheck)
	defer tick.Stop()
	for {
		r.drop()
		r.sync()
		r.settle()
		select {
		case <-done:
			return
		case <-tick.C:
		case <-r.wake:
		}
	}
}

// sync starts the links of live peers that have none, and stops those of peers that
// are not live any more (their waits no longer count on them: settle).
func (r *routes) sync() {
	live := r.c.liveMembers()
	names := make(map[string]bool, len(live))
	for _, m := range live {
		names[m.Name] = true
		r.mu.Lock()
		l := r.links[m.Name]
		if l == nil {
			l = newRouteLink(r, m.Name)
			r.links[m.Name] = l
		}
		r.mu.Unlock()
		l.start()
		r.c.fwd.link(m.Name)
	}
	var stop []*routeLink
	r.mu.Lock()
	for name, l := range r.links {
		if !names[name] {
			delete(r.links, name)
			stop = append(stop, l)
		}
	}
	r.mu.Unlock()
	for _, l := range stop {
		l.stop()
	}
	for _, name := range r.c.fwd.names() {
		if !names[name] {
			r.c.fwd.gone(name)
		}
	}
}

var errNotLive = errors.New("cluster: not a live member")
