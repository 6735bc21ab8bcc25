package listener

import (
	"errors"
	"sync"
	"sync/atomic"
)

// A tlsGate bounds the TLS handshakes in progress, and so the goroutines they run on.
//
// A handshake needs a goroutine (crypto/tls reads as if blocking; tls.go) from the
// client's first record until its Finished: a round trip and a millisecond or so of CPU
// for a real client, the whole connect timeout for one that sends a ClientHello and
// stops. Without a bound a flood of ClientHellos is a flood of goroutines, about 20 KiB
// each (12 KiB of heap, 8 KiB of stack, measured on Go 1.26).
//
// At most max handshakes run at once. A connection whose ClientHello comes while all
// slots are taken waits in a FIFO queue, holding no goroutine (only its ClientHello, as
// it did while that arrived), for up to maxQueue others ahead of it; beyond that it is
// closed at once and counted as refused. A handshake goroutine that finishes takes the
// next waiting connection itself, so a burst is worked through by at most max
// goroutines, not one each. The connect timeout, counted from the accept, still bounds
// the whole wait.
//
// Why a queue rather than refusing at once: a storm of reconnecting clients arrives in
// bursts much larger than the slots, which free up within milliseconds; refusing would
// send most of the burst into back-off for nothing. Why a bounded one: past a few times
// the slots, a newcomer would wait longer than a handshake takes, and an operator is
// better served by a client that fails fast (and a counter that says so) than by one that
// times out.
//
// A waiting connection that closes (connect timeout, peer gone) stays in the queue until
// it comes up, and is skipped then; when the queue is full, closed ones are swept out
// before a newcomer is refused.
//
// Locking: mu guards running and the queue. Lock order: a tlsConn's mu, then mu (admit
// is called under the connection's lock; next takes the connection's lock after
// releasing mu).
type tlsGate struct {
	max      int
	maxQueue int

	mu      sync.Mutex
	running int
	queue   []*tlsConn // waiting, oldest first from head
	head    int

	refused atomic.Uint64
}

// errTLSBusy closes a connection that found every handshake slot taken and the queue full.
var errTLSBusy = errors.New("listener: too many TLS handshakes in progress")

// tlsQueueFactor is how many times max connections may wait for a handshake slot.
const tlsQueueFactor = 4

func newTLSGate(max int) *tlsGate {
	return &tlsGate{max: max, maxQueue: tlsQueueFactor * max}
}

// Verdicts of admit.
const (
	gateRun    = iota // a slot is the caller's: start a handshake goroutine
	gateWait          // queued: a handshake goroutine will take it
	gateRefuse        // no slot, no room in the queue: close the connection
)

// admit decides what becomes of t, whose ClientHello is complete. t.mu is held.
func (g *tlsGate) admit(t *tlsConn) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running < g.max {
		g.running++
		return gateRun
	}
	if len(g.queue)-g.head >= g.maxQueue {
		g.sweepLocked()
		if len(g.queue)-g.head >= g.maxQueue {
			g.refused.Add(1)
			return gateRefuse
		}
	}
	g.queue = append(g.queue, t)
	return gateWait
}

// next is called by a handshake goroutine that has finished with a connection: it returns
// the next waiting connection, its handshake begun (the goroutine keeps its slot for it),
// or nil when none waits (the slot is given back and the goroutine ends).
func (g *tlsGate) next() *tlsConn {
	for {
		g.mu.Lock()
		if g.head == len(g.queue) {
			g.running--
			g.mu.Unlock()
			return nil
		}
		t := g.queue[g.head]
		g.queue[g.head] = nil
		g.head++
		if g.head == len(g.queue) {
			g.queue, g.head = g.queue[:0], 0
			if cap(g.queue) > 64 {
				g.queue = nil // let a storm's backing array go
			}
		}
		g.mu.Unlock()
		if t.begin() {
			return t
		}
		// It closed while waiting: skip it.
	}
}

// sweepLocked drops the waiting connections that have closed. mu is held.
func (g *tlsGate) sweepLocked() {
	live := g.queue[:0]
	for _, t := range g.queue[g.head:] {
		if !t.gone() {
			live = append(live, t)
		}
	}
	clear(g.queue[len(live):])
	g.queue, g.head = live, 0
}

// stats returns the handshakes running, the connections waiting (some may have closed
// since) and the connections refused so far.
func (g *tlsGate) stats() (running, waiting int, refused uint64) {
	g.mu.Lock()
	running, waiting = g.running, len(g.queue)-g.head
	g.mu.Unlock()
	return running, waiting, g.refused.Load()
}
