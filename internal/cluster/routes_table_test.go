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

// TestRouteRefcount: only a filter's first subscription and its last one leaving change
// the table; a shared filter is a route of its own; every change gets the next version,
// and a later subscriber to a filter waits for the version that added it.
func TestRouteRefcount(t *testing.T) {
	r := newRoutes(&Cluster{})
	l := idleLink(r, "p")
	if v := r.add("a/+"); v != 1 {
		t.Fatalf("first add: version %d", v)
	}
	if v := r.add("a/+"); v != 1 {
		t.Fatalf("second subscriber: version %d, want the one that added the filter", v)
	}
	r.add("$share/g/a/+")
	r.remove("a/+")
	if got := pendingOf(l); len(got) != 2 {
		t.Fatalf("one of two subscribers left: deltas %v", got)
	}
	r.remove("a/+")
	r.remove("a/+") // more removals than subscriptions change nothing
	want := []string{"+a/+@1", "+$share/g/a/+@2", "-a/+@3"}
	if got := pendingOf(l); !slices.Equal(got, want) {
		t.Fatalf("deltas %v, want %v", got, want)
	}
	snap, v := r.snapshotLocked()
	if !slices.Equal(snap, []string{"$share/g/a/+"}) || v != 3 {
		t.Fatalf("snapshot %v at %d", snap, v)
	}
}

// TestRouteDeltasOverflow: a peer whose stream lags past routeDeltaMax gets a snapshot
// instead of the deltas.
func TestRouteDeltasOverflow(t *testing.T) {
	r := newRoutes(&Cluster{})
	l := idleLink(r, "p")
	for i := range routeDeltaMax + 1 {
		r.add(fmt.Sprintf("f/%d", i))
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
		r.remote.Match([]byte(topic), &m)
		var out []pubsub.SubscriberID
		for _, s := range m.Subs {
			out = append(out, s.Subscriber)
		}
		return out
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
	if !c.routes.wait(c.routes.add("a"), func() { done = true }) {
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
