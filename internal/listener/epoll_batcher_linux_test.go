//go:build linux && !bifrost_portable

package listener

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// batcher is a recorder that is a Batcher: it checks the round contract as events come
// (a valid loop, no two calls of one loop at once, EndRound after the round's data).
type batcher struct {
	*recorder
	mu      sync.Mutex
	busy    []atomic.Bool // by loop: an OnRoundData runs
	pending []bool        // by loop: data delivered since the loop's last EndRound
	data    atomic.Int64  // OnRoundData calls
	rounds  atomic.Int64  // EndRound calls
}

func newBatcher(t testing.TB, pollers int) *batcher {
	return &batcher{recorder: newRecorder(t), busy: make([]atomic.Bool, pollers), pending: make([]bool, pollers)}
}

func (b *batcher) OnRoundData(c Conn, data []byte, loop int) {
	if loop < 0 || loop >= len(b.busy) {
		b.t.Errorf("OnRoundData from loop %d of %d", loop, len(b.busy))
		return
	}
	if !b.busy[loop].CompareAndSwap(false, true) {
		b.t.Errorf("two OnRoundData calls of loop %d at once", loop)
	}
	defer b.busy[loop].Store(false)
	b.mu.Lock()
	b.pending[loop] = true
	b.mu.Unlock()
	b.data.Add(1)
	b.recorder.OnData(c, data)
}

func (b *batcher) EndRound(loop int) {
	b.mu.Lock()
	b.pending[loop] = false
	b.mu.Unlock()
	b.rounds.Add(1)
}

// TestBatcherRounds: a Handler that is a Batcher gets the data the pollers read through
// OnRoundData, with the poller's index, and each poller ends its round (EndRound) after
// delivering it, on every transport; what arrives is what was sent.
func TestBatcherRounds(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		const pollers, clients = 2, 16
		h := newBatcher(t, pollers)
		s := newTestServer(t, h, Options{Pollers: pollers})
		if s.Pollers() != pollers {
			t.Fatalf("Pollers() = %d, want %d", s.Pollers(), pollers)
		}
		l := listen(t, s, typ)
		conns := make([]Conn, clients)
		cs := make([]*client, clients)
		for i := range clients {
			cs[i] = dial(t, l)
			conns[i] = recv(t, h.opened, "OnOpen")
		}
		for round := range 3 {
			for i, c := range cs {
				c.send(t, fmt.Appendf(nil, "round %d from client %d;", round, i))
			}
		}
		want := map[string]bool{}
		for i := range clients {
			want[fmt.Sprintf("round 0 from client %d;round 1 from client %d;round 2 from client %d;", i, i, i)] = true
		}
		testenv.WaitFor(t, "every client's bytes", func() bool {
			got := 0
			for _, c := range conns {
				if want[string(h.received(c))] {
					got++
				}
			}
			return got == clients
		})
		testenv.WaitFor(t, "every round ended", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, p := range h.pending {
				if p {
					return false
				}
			}
			return true
		})
		if typ == "tcp" || typ == "ws" {
			if h.data.Load() == 0 {
				t.Error("no data came through OnRoundData")
			}
		}
		if h.data.Load() > 0 && h.rounds.Load() == 0 {
			t.Error("no EndRound")
		}
	})
}
