package broker

import (
	"log/slog"
	"sync"
	"testing"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// noRoutes is the routing part of a test Cluster with no peers: nothing is routed
// elsewhere and nothing waits.
type noRoutes struct{}

func (noRoutes) AddRoute(string, func()) bool                { return false }
func (noRoutes) RemoveRoute(string)                          {}
func (noRoutes) RemoteGroup(string) bool                     { return false }
func (noRoutes) Forward(*Outbound) int                       { return 0 }
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

// routeRecorder is a node of a fake cluster that keeps the filters AddRoute got.
type routeRecorder struct {
	*fakeNode
	mu    sync.Mutex
	added []string
}

func (r *routeRecorder) AddRoute(filter string, _ func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added = append(r.added, filter)
	return false
}

// TestAddRouteSharesFilter: the filter a subscription hands the cluster is the string
// its session keeps, not a copy: the cluster's route table keys by it, and a copy would
// cost every local route its filter's bytes again.
func TestAddRouteSharesFilter(t *testing.T) {
	c := newFakeCluster()
	rec := &routeRecorder{fakeNode: &fakeNode{c: c, name: "n1", serving: true}}
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
	cl, _ := dialC(t, b, packet.V5, "sub", nil)
	cl.subscribe(1, 1, "devices/1/cmd")
	b.mu.Lock()
	subs := b.sessions["sub"].Subs()
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
