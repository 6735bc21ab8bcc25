package broker

import (
	"testing"

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
