package bridge

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
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
