package broker

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// noRoutes is the routing part of a test Cluster with no peers: nothing is routed
// elsewhere and nothing waits.
type noRoutes struct{}

func (noRoutes) AddRoute(string, bool, func()) bool          { return false }
func (noRoutes) RemoveRoute(string)                          {}
func (noRoutes) RemoteGroup(string) bool                     { return false }
func (noRoutes) Forward(*Outbound, func()) int               { return 0 }
func (noRoutes) ForwardShared(*session.Message, string) bool { return false }

// TestInboundWaitsForStore: a batch of forwarded messages that a persistent session
// queued ends (and the cluster acknowledges it to the sending node) only once the store
// has it.
func TestInboundWaitsForStore(t *testing.T) {
	inner := store.NewMemory()
	defer inner.Close()
	g := &gateStore{Store: inner}
	b := storeBroker(t, g, nil)
	sub := dialT(t, b, packet.V5, "sub", persist(300))
	sub.subscribe(1, 1, "f/#")
	sub.drop()

	g.close()
	t.Cleanup(g.open) // before the broker's Close, which waits for the store
	in := b.BeginForwarded()
	var m session.Message
	m.BorrowForwarded([]byte("f/x"), []byte("kept"), nil, 1, false, 0)
	if !in.Deliver(&m, "", false) {
		t.Fatal("the persistent session did not take the message")
	}
	ended := make(chan struct{})
	go func() {
		in.End()
		close(ended)
	}()
	testenv.WaitFor(t, "the batch's commit to reach the store", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.pending) > 0
	})
	select {
	case <-ended:
		t.Fatal("the batch ended before the store had its message")
	default:
	}
	g.open()
	<-ended
	if q := loadDump(t, inner).queued["sub"]; len(q) != 1 {
		t.Fatalf("the store holds %d queued messages for sub, want 1", len(q))
	}
}

// routeRecorder is a node of a fake cluster that keeps the filters AddRoute got and
// the route changes it was told, as a table would.
type routeRecorder struct {
	*fakeNode
	mu     sync.Mutex
	added  []string
	later  int             // AddRoute calls without first
	routes map[string]bool // filter → routed, from first and last
	wrong  []string        // a first for a routed filter, a last for one not routed
}

func (r *routeRecorder) AddRoute(filter string, first bool, _ func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added = append(r.added, filter)
	switch {
	case !first:
		r.later++
	case r.routes[filter]:
		r.wrong = append(r.wrong, "first "+filter)
	default:
		r.routes[filter] = true
	}
	return false
}

func (r *routeRecorder) RemoveRoute(filter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.routes[filter] {
		r.wrong = append(r.wrong, "last "+filter)
	}
	delete(r.routes, filter)
}

// recorderBroker is a broker whose cluster records routes.
func recorderBroker(t *testing.T) (*Broker, *routeRecorder) {
	t.Helper()
	c := newFakeCluster()
	rec := &routeRecorder{fakeNode: &fakeNode{c: c, name: "n1", serving: true}, routes: map[string]bool{}}
	cfg := conf.Default()
	cfg.Listeners = nil
	cfg.SysInterval = new(conf.Duration)
	cfg.EnsureDefaults()
	b, err := New(Options{Config: cfg, Logger: slog.New(slog.DiscardHandler), Cluster: rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(store.NewMemory()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c.nodes["n1"] = b
	return b, rec
}

// TestAddRouteSharesFilter: the filter a subscription hands the cluster is the string
// its session keeps, not a copy: the cluster's queues keep it while the route is in
// flight, and a copy would cost them its bytes again.
func TestAddRouteSharesFilter(t *testing.T) {
	b, rec := recorderBroker(t)
	cl, _ := dialC(t, b, packet.V5, "sub", nil)
	cl.subscribe(1, 1, "devices/1/cmd")
	b.mu.Lock()
	subs := b.sessions.m["sub"].Subs()
	b.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.added) != 1 || len(subs) != 1 || rec.added[0] != subs[0].Filter {
		t.Fatalf("routes %q, session's subscriptions %+v", rec.added, subs)
	}
	if unsafe.StringData(rec.added[0]) != unsafe.StringData(subs[0].Filter) {
		t.Fatal("the route's filter is a copy of the session's")
	}
}

// TestRoutesFollowIndex: a filter's first local subscriber routes it, a later one only
// asks for its SUBACK's version, and the last one leaving withdraws it; shared groups are
// routes of their own; RoutedFilters names each routed filter once.
func TestRoutesFollowIndex(t *testing.T) {
	b, rec := recorderBroker(t)
	x, _ := dialC(t, b, packet.V5, "x", nil)
	y, _ := dialC(t, b, packet.V5, "y", nil)
	x.subscribe(1, 1, "t/#")
	y.subscribe(1, 1, "t/#")
	x.subscribe(2, 1, "$share/g/t/#")
	y.subscribe(2, 1, "$share/g/t/#")
	var got []string
	b.RoutedFilters(func(filters []string) { got = append(got, filters...) })
	slices.Sort(got)
	if want := []string{"$share/g/t/#", "t/#"}; !slices.Equal(got, want) {
		t.Fatalf("RoutedFilters %q; want %q", got, want)
	}
	rec.mu.Lock()
	if rec.later != 2 || len(rec.routes) != 2 {
		t.Fatalf("routes %v, %d later subscribers told; want 2 routes and 2", rec.routes, rec.later)
	}
	rec.mu.Unlock()
	x.send(&packet.Unsubscribe{PacketID: 3, Filters: [][]byte{[]byte("t/#"), []byte("$share/g/t/#")}})
	x.waitLines(1)
	rec.mu.Lock()
	if len(rec.routes) != 2 {
		t.Fatalf("routes %v after one of two subscribers left; want both", rec.routes)
	}
	rec.mu.Unlock()
	y.send(&packet.Disconnect{}) // the session ends: its subscriptions go
	testenv.WaitFor(t, "routes withdrawn", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.routes) == 0
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.wrong) != 0 {
		t.Fatalf("changes out of order: %q", rec.wrong)
	}
}

// TestRoutesChurn: subscribers of one filter come and go on many goroutines at once; the
// cluster is told first subscribers and last leavings in the index's order, never a
// first for a filter routed or a last for one not, and nothing is left routed.
func TestRoutesChurn(t *testing.T) {
	b, rec := recorderBroker(t)
	const workers, rounds = 8, 300
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				tap, err := b.NewTap(func(*session.Message, uint8, bool) bool { return false })
				if err == nil {
					err = tap.Subscribe("churn/#", 2)
				}
				if err != nil {
					t.Error(err)
					return
				}
				tap.Close([]string{"churn/#"})
			}
		})
	}
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.wrong) != 0 || len(rec.routes) != 0 {
		t.Fatalf("out of order: %d changes (first %q); left routed: %v", len(rec.wrong), rec.wrong[:min(len(rec.wrong), 3)], rec.routes)
	}
}

// TestDistrustKeepsNoOrphan: a reload's pass over a session's subscriptions does not
// bring back one that left the index meanwhile: on a node of a cluster it would make its
// filter look routed while no subscriber has it.
func TestDistrustKeepsNoOrphan(t *testing.T) {
	b, rec := recorderBroker(t)
	x, _ := dialC(t, b, packet.V5, "x", persist(300))
	x.subscribe(1, 1, "t")
	b.mu.Lock()
	s := b.sessions.m["x"]
	b.mu.Unlock()
	b.indexUnsubscribe([]byte("t"), pubsub.SubscriberID(s.ID())) // an UNSUBSCRIBE's first step
	b.distrust(s)                                                // a reload, with the session's list from before
	if b.index.Subscribed([]byte("t")) {
		t.Fatal("the index keeps a subscription its session left")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.routes) != 0 {
		t.Fatalf("routes %v; want none", rec.routes)
	}
}

// forwardPeers is a cluster that forwards every message to peers nodes and keeps the
// dones it is given until ack; early of them it calls before Forward returns, as a peer
// that acknowledged at once would.
type forwardPeers struct {
	*fakeNode
	peers, early int
	mu           sync.Mutex
	dones        []func()
	nilDone      int // Forward calls without done
}

func (f *forwardPeers) Forward(_ *Outbound, done func()) int {
	if done == nil {
		f.mu.Lock()
		f.nilDone++
		f.mu.Unlock()
		return f.peers
	}
	for i := range f.peers {
		if i < f.early {
			done()
			continue
		}
		f.mu.Lock()
		f.dones = append(f.dones, done)
		f.mu.Unlock()
	}
	return f.peers
}

// ack calls the last done kept, and reports whether there was one.
func (f *forwardPeers) ack() bool {
	f.mu.Lock()
	n := len(f.dones)
	if n == 0 {
		f.mu.Unlock()
		return false
	}
	done := f.dones[n-1]
	f.dones[n-1] = nil
	f.dones = f.dones[:n-1]
	f.mu.Unlock()
	done()
	return true
}

// TestForwardHoldsAck: a forwarded QoS 1 or 2 PUBLISH's PUBACK or PUBREC waits until
// every node the cluster gave the message to has called done, some of them before Forward
// returned, and goes out once; a QoS 0 PUBLISH hands the cluster no done.
func TestForwardHoldsAck(t *testing.T) {
	for _, sc := range []struct{ peers, early int }{{2, 0}, {2, 1}, {3, 3}, {0, 0}} {
		for _, qos := range []byte{1, 2} {
			t.Run(fmt.Sprintf("Peers=%d/Early=%d/QoS=%d", sc.peers, sc.early, qos), func(t *testing.T) {
				b := benchBroker(t)
				f := &forwardPeers{fakeNode: &fakeNode{c: newFakeCluster(), name: "a", serving: true}, peers: sc.peers, early: sc.early}
				b.cluster = f
				pub := &authTestConn{}
				b.OnOpen(pub)
				b.OnData(pub, connectPacket(packet.V5, "pub", "", ""))
				pub.waitPackets(t, packet.V5, 1)
				want := 1
				for id := uint16(1); id <= 2; id++ { // the second one's hold comes from the pool
					b.OnData(pub, (&packet.Publish{Topic: []byte("f/x"), QoS: qos, PacketID: id, Payload: []byte("x")}).AppendTo(nil, packet.V5))
					for range sc.peers - sc.early {
						if n := len(pub.packets(t, packet.V5)); n != want {
							t.Fatalf("%d packets while a peer has not acknowledged; want %d", n, want)
						}
						f.ack()
					}
					if f.ack() {
						t.Fatal("more dones kept than peers")
					}
					want++
					ps := pub.waitPackets(t, packet.V5, want)
					a, ok := ps[want-1].(*packet.Ack)
					wantType := map[byte]packet.Type{1: packet.PUBACK, 2: packet.PUBREC}[qos]
					if !ok || a.PacketType != wantType || a.PacketID != id {
						t.Fatalf("after every peer's done: %v; want %v %d", ps[want-1], wantType, id)
					}
				}
				if n := len(pub.packets(t, packet.V5)); n != want {
					t.Fatalf("%d packets; want %d: one acknowledgement per PUBLISH", n, want)
				}
				b.OnData(pub, (&packet.Publish{Topic: []byte("f/x"), Payload: []byte("x")}).AppendTo(nil, packet.V5))
				f.mu.Lock()
				defer f.mu.Unlock()
				if f.nilDone != 1 || len(f.dones) != 0 {
					t.Fatalf("QoS 0: %d Forward calls without done, %d dones kept; want 1, 0", f.nilDone, len(f.dones))
				}
			})
		}
	}
}
