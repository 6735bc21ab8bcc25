package bridge

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// A gateStore holds the reports of the commits made while it is held until it is
// released: the store has not made them durable yet, as far as the broker can tell.
type gateStore struct {
	store.Store
	mu   sync.Mutex
	gate chan struct{} // nil: commits report at once
}

func (g *gateStore) Commit(b *store.Batch, done func(error)) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate == nil {
		g.Store.Commit(b, done)
		return
	}
	g.Store.Commit(b, func(err error) { <-gate; done(err) })
}

func (g *gateStore) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gateStore) release() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

// TestStoredQueueAckWaits: a QoS 1 message that only a bridge's stored queue keeps is
// acknowledged to its publisher once the store has it, not before (fails if the tap does
// not report what it stored). The check that the PUBACK has not come is bounded: 300 ms
// in which an acknowledgement that does not wait arrives many times over.
func TestStoredQueueAckWaits(t *testing.T) {
	gs := &gateStore{}
	bc := bridgeConf("up", fmt.Sprintf("127.0.0.1:%d", freePort(t)), conf.BridgeV5,
		conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
	sb := startStoredWrap(t, filepath.Join(t.TempDir(), "store"), conf.EngineLog,
		func(st store.Store) store.Store { gs.Store = st; return gs }, bc)
	t.Cleanup(gs.release) // before the store closes (cleanups run last first)
	pub, _ := client(t, sb.addr, "local-pub", true, "")
	br := sb.set.Bridges()[0]

	gs.hold()
	tok := pub.Publish("q/m", 1, false, "kept")
	testenv.WaitFor(t, "the message in the bridge's stored queue", func() bool { return br.Stats().Stored == 1 })
	if tok.WaitTimeout(300 * time.Millisecond) {
		t.Fatal("PUBACK before the store reported the bridge's entry durable")
	}
	gs.release()
	if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("no PUBACK once the store has the entry: %v", tok.Error())
	}
}

// A failStore fails the next commit when told to: the batch is not written, and its done
// reports a write error, as a full disk would.
type failStore struct {
	store.Store
	fail atomic.Bool
}

func (f *failStore) Commit(b *store.Batch, done func(error)) {
	if f.fail.CompareAndSwap(true, false) {
		b.Reset()
		f.Store.Commit(b, func(error) { done(store.ErrNoSpace) })
		return
	}
	f.Store.Commit(b, done)
}

// TestStoredQueueResync: a commit that fails loses the bridge's entries it carried; the
// broker's resync after it writes the bridge's queue whole again, so a restart finds
// every message the queue held (fails without the bridge's rewrite at the resync).
func TestStoredQueueResync(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	bc := bridgeConf("up", fmt.Sprintf("127.0.0.1:%d", freePort(t)), conf.BridgeV5,
		conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
	fs := &failStore{}
	sb := startStoredWrap(t, dir, conf.EngineLog, func(st store.Store) store.Store { fs.Store = st; return fs }, bc)
	j := sb.b.Journal()
	fs.fail.Store(true)
	if err := sb.b.Publish("q/m", []byte("m0"), 1, false); err != nil {
		t.Fatal(err)
	}
	j.WaitCommitted() // m0's commit failed
	// m1's commit rewrites the whole state first.
	if err := sb.b.Publish("q/m", []byte("m1"), 1, false); err != nil {
		t.Fatal(err)
	}
	j.WaitCommitted()
	sb.close()

	sb = startStored(t, dir, conf.EngineLog, bc)
	if got := sb.set.Bridges()[0].waiting(); !slices.Equal(got, []string{"m0", "m1"}) {
		t.Fatalf("after a failed commit and a restart the store holds %v, want [m0 m1]", got)
	}
}
