package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// The route table and the queues without a network.

// idleLink is a route link whose stream never runs: what it would send stays pending.
func idleLink(r *routes, name string) *routeLink {
	l := &routeLink{r: r, name: name, wake: make(chan struct{}, 1)}
	r.links[name] = l
	return l
}

func pendingOf(l *routeLink) []string {
	var out []string
	for _, d := range l.pending {
		op := "+"
		if d.remove {
			op = "-"
		}
		out = append(out, fmt.Sprintf("%s%s@%d", op, d.filter, d.version))
	}
	return out
}

// listedHost is a broker that lists the filters of its index for a snapshot.
type listedHost struct {
	nopHost
	filters []string
}

func (l *listedHost) RoutedFilters(fn func([]string)) { fn(l.filters) }

// TestRouteChanges: a filter's first subscription and its last one leaving change the
// table; a shared filter is a route of its own; every change gets the next version, and
// a later subscriber to a filter waits for the version that added it. A snapshot is the
// broker's list with the version of the last change.
func TestRouteChanges(t *testing.T) {
	c := &Cluster{}
	c.routes = newRoutes(c)
	r := c.routes
	l := idleLink(r, "p")
	if v := r.add("a/+", true); v != 1 {
		t.Fatalf("first add: version %d", v)
	}
	if v := r.add("a/+", false); v != 1 {
		t.Fatalf("second subscriber: version %d, want the one that added the filter", v)
	}
	r.add("$share/g/a/+", true)
	r.remove("a/+")
	want := []string{"+a/+@1", "+$share/g/a/+@2", "-a/+@3"}
	if got := pendingOf(l); !slices.Equal(got, want) {
		t.Fatalf("deltas %v, want %v", got, want)
	}
	if n := r.localRoutes(); n != 1 {
		t.Fatalf("%d local routes; want 1", n)
	}
	if snap, v := r.snapshot(nil); len(snap) != 0 || v != 3 {
		t.Fatalf("snapshot %v at %d before the broker is connected; want none at 3", snap, v)
	}
	c.Attach(&listedHost{filters: []string{"$share/g/a/+"}})
	locked := false
	snap, v := r.snapshot(func() { locked = true })
	if !slices.Equal(snap, []string{"$share/g/a/+"}) || v != 3 || !locked {
		t.Fatalf("snapshot %v at %d (locked ran: %v)", snap, v, locked)
	}
}

// TestRouteVersionFloor: the version that added a filter is kept while a live peer has
// not acknowledged it; once every one has, it is forgotten and a later subscriber waits
// for the floor, a version every live peer had then, never one below its filter's.
func TestRouteVersionFloor(t *testing.T) {
	r := newRoutes(&Cluster{})
	l := idleLink(r, "p")
	r.add("a", true)
	r.add("b", true)
	r.add("c", true)
	l.acked = 2 // p has a and b
	r.mu.Lock()
	r.raiseFloorLocked([]string{"p"})
	r.mu.Unlock()
	if len(r.fresh) != 1 || r.floor != 2 {
		t.Fatalf("versions kept %v, floor %d; want c's only, floor 2", r.fresh, r.floor)
	}
	if va, vc := r.add("a", false), r.add("c", false); va != 2 || vc != 3 {
		t.Fatalf("later subscribers of a and c wait for %d and %d; want 2 and 3", va, vc)
	}
	r.mu.Lock()
	r.raiseFloorLocked([]string{"p", "q"}) // q has no link yet: nothing is forgotten
	r.mu.Unlock()
	if r.floor != 2 {
		t.Fatalf("floor %d with a live peer not linked", r.floor)
	}
	l.acked = 3
	r.mu.Lock()
	r.raiseFloorLocked([]string{"p"})
	r.mu.Unlock()
	if len(r.fresh) != 0 || r.floor != 3 {
		t.Fatalf("versions kept %v, floor %d once p has all", r.fresh, r.floor)
	}
	r.remove("c")
	if v := r.add("c", true); v != 5 {
		t.Fatalf("c added again at %d; want 5", v)
	}
}

// TestRouteDeltasOverflow: a peer whose stream lags past routeDeltaMax gets a snapshot
// instead of the deltas.
func TestRouteDeltasOverflow(t *testing.T) {
	r := newRoutes(&Cluster{})
	l := idleLink(r, "p")
	for i := range routeDeltaMax + 1 {
		r.add(fmt.Sprintf("f/%d", i), true)
	}
	if !l.resnap || len(l.pending) != 0 {
		t.Fatalf("resnap %v with %d deltas kept", l.resnap, len(l.pending))
	}
}

// TestRemoteTable: a peer's snapshot and deltas go into the remote index under its node
// id; a stream that no longer owns the table is refused; a peer gone leaves no route.
func TestRemoteTable(t *testing.T) {
	r := newRoutes(&Cluster{})
	match := func(topic string) []pubsub.SubscriberID {
		var m pubsub.Matches
		return r.matchNodes([]byte(topic), &m, nil)
	}
	ended := map[uint64]int{} // stream → times its end was called
	end := func(stream uint64) func() { return func() { ended[stream]++ } }
	r.own("p", 1, end(1))
	r.own("q", 2, end(2))
	if !r.apply("p", 1, true, []string{"a/#", "b"}, nil, 5) || !r.apply("q", 2, true, []string{"a/1"}, nil, 1) {
		t.Fatal("snapshot refused")
	}
	p, q := r.ids["p"], r.ids["q"]
	if got := match("a/1"); !slices.Equal(sorted(got), sorted([]pubsub.SubscriberID{p, q})) {
		t.Fatalf("a/1 matches %v", got)
	}
	r.apply("p", 1, false, []string{"c"}, []string{"a/#"}, 6)
	if got := match("a/1"); !slices.Equal(got, []pubsub.SubscriberID{q}) {
		t.Fatalf("after p's delta, a/1 matches %v", got)
	}
	// A new stream of p replaces its table with its snapshot.
	r.own("p", 3, end(3))
	if r.apply("p", 1, false, []string{"z"}, nil, 7) {
		t.Fatal("the old stream's delta was applied")
	}
	if ended[1] != 1 || ended[3] != 0 {
		t.Fatalf("streams ended %v; want p's first (replaced) only", ended)
	}
	r.apply("p", 3, true, []string{"b"}, nil, 7)
	if got := match("c"); len(got) != 0 {
		t.Fatalf("c still routed to %v after a snapshot without it", got)
	}
	if got := match("b"); !slices.Equal(got, []pubsub.SubscriberID{p}) {
		t.Fatalf("b matches %v after p's snapshot with it", got)
	}
	r.gone("p")
	r.drop() // the routes goroutine's next step
	if got := match("b"); len(got) != 0 {
		t.Fatalf("b routed to %v after p is gone", got)
	}
	if r.apply("p", 3, false, []string{"b"}, nil, 8) {
		t.Fatal("a gone peer's stream still applies")
	}
	// Its stream to us is ended: the peer may not know it was declared gone, and its
	// link would otherwise not send a snapshot again before its next change.
	if ended[3] != 1 || ended[2] != 0 {
		t.Fatalf("streams ended %v; want p's second (gone) too, not q's", ended)
	}
	if n := r.peerRoutes(); n["q"] != 1 || len(n) != 1 {
		t.Fatalf("tables %v", n)
	}
}

// TestExactRoutes: a peer's exact filters match their topic only, in the exact set and
// not the remote index; two filters of one hash (the same filter added twice stands in
// for a collision) stay routed until both are removed, and the route count follows.
func TestExactRoutes(t *testing.T) {
	r := newRoutes(&Cluster{})
	r.own("p", 1, nil)
	r.apply("p", 1, true, []string{"a/b", "a/+", "$share/g/a/b"}, nil, 1)
	p := r.ids["p"]
	var m pubsub.Matches
	if got := r.matchNodes([]byte("a/b"), &m, nil); !slices.Equal(got, []pubsub.SubscriberID{p}) || len(m.Groups) != 1 {
		t.Fatalf("a/b matches %v and %d groups; want p once, and the group", got, len(m.Groups))
	}
	if got := r.filtersOf(p); len(got) != 2 || slices.Contains(got, "a/b") {
		t.Fatalf("remote index holds %v; want the wildcard and shared filters only", got)
	}
	if got := r.matchNodes([]byte("ab"), &m, nil); len(got) != 0 {
		t.Fatalf("ab matches %v", got)
	}
	r.exact.add(p, "x")
	r.exact.add(p, "x")
	if !r.exact.remove(p, "x") || len(r.exact.match([]byte("x"), nil)) != 1 {
		t.Fatal("the remove of one of two filters of a hash dropped the other's route")
	}
	if !r.exact.remove(p, "x") || r.exact.remove(p, "x") || len(r.exact.match([]byte("x"), nil)) != 0 {
		t.Fatal("x routed or removable after both of its filters were removed")
	}
	r.apply("p", 1, false, []string{"c"}, []string{"a/b", "zz"}, 2)
	if got := r.peerRoutes()["p"]; got != 3 {
		t.Fatalf("p has %d routes; want 3 (a/+, $share/g/a/b, c)", got)
	}
	if got := r.matchNodes([]byte("a/b"), &m, nil); !slices.Equal(got, []pubsub.SubscriberID{p}) {
		t.Fatalf("a/b matches %v; want p through a/+", got)
	}
}

// TestRouteDeltasNet: a batch of deltas sends what changes for the peer: a filter
// removed and added again, or added and removed, in one batch is not sent (an add the
// peer already has would count twice in its exact set).
func TestRouteDeltasNet(t *testing.T) {
	r := newRoutes(&Cluster{})
	r.add("a", true)
	r.add("b", true)
	l := idleLink(r, "p")
	r.remove("a")
	r.add("a", true) // the peer has a: nothing to send
	r.add("c", true)
	r.remove("c") // the peer lacks c: nothing to send
	r.remove("b")
	r.add("d", true)
	r.remove("d")
	r.add("d", true)
	add, remove := netDeltas(l.pending)
	if !slices.Equal(add, []string{"d"}) || !slices.Equal(remove, []string{"b"}) {
		t.Fatalf("sent +%v -%v; want +[d] -[b]", add, remove)
	}
}

func sorted(s []pubsub.SubscriberID) []pubsub.SubscriberID { slices.Sort(s); return s }

// TestForwardQueueFull: a full queue drops QoS 0 (counted) and takes QoS 1 all the same.
func TestForwardQueueFull(t *testing.T) {
	c := &Cluster{ctx: context.Background()}
	c.routes = newRoutes(c)
	f := newForwarder(c)
	l := newFwdLink(f, "p") // not started: nothing leaves the queue
	m := session.NewLocalMessage("t", []byte("x"), 0, false)
	for i := range fwdQueueMsgs {
		if !l.push(newOutMsg(m)) {
			t.Fatalf("QoS 0 message %d refused below the bound", i)
		}
	}
	o := newOutMsg(m)
	if l.push(o) {
		t.Fatal("QoS 0 taken past the bound")
	}
	o.free()
	if l.drops.Load() != 1 {
		t.Fatalf("%d drops counted", l.drops.Load())
	}
	if !l.push(newOutMsg(session.NewLocalMessage("t", []byte("x"), 1, false))) {
		t.Fatal("QoS 1 refused: it must never be dropped")
	}
	if d := l.depth(); d != fwdQueueMsgs+1 {
		t.Fatalf("depth %d", d)
	}
}

// TestSubackWaitsForSeeds: a node that has not yet tried its seeds knows no peer, so a
// SUBACK waits until it has (then for the peers it learned of), not zero peers.
func TestSubackWaitsForSeeds(t *testing.T) {
	c := &Cluster{formed: make(chan struct{})}
	c.routes = newRoutes(c)
	done := false
	if !c.routes.wait(c.routes.add("a", true), func() { done = true }) {
		t.Fatal("a SUBACK on a node that has not joined went at once")
	}
	c.routes.settle()
	if done {
		t.Fatal("released before the seeds were tried")
	}
	c.joinTried.Store(true) // no seed answered, or its members are known now
	c.routes.settle()
	if !done {
		t.Fatal("still waiting once the seeds were tried, with no live peer")
	}
}

// TestRouteResnapOnAttach: connecting the broker has every link send its snapshot again:
// one sent before had none of the broker's filters.
func TestRouteResnapOnAttach(t *testing.T) {
	c := &Cluster{}
	c.routes = newRoutes(c)
	l := idleLink(c.routes, "p")
	c.routes.add("a", true)
	c.Attach(&listedHost{filters: []string{"a"}})
	if !l.resnap || len(l.pending) != 0 {
		t.Fatalf("resnap %v, %d deltas after Attach; want a snapshot", l.resnap, len(l.pending))
	}
}
