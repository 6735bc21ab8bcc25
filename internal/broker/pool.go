package broker

import (
	"runtime"
	"sync"
)

// pool runs blocking work (password hashes, authentication hooks) off the event loops, on
// at most GOMAXPROCS goroutines that exist only while there is work: an idle broker parks
// none, and a storm of CONNECTs queues up instead of starting a goroutine (and a stack)
// each. Work runs in the order submitted.
type pool struct {
	// start runs a worker on a goroutine of the broker's (counted, labelled, waited for
	// by Close), and reports false once the broker is closing: then the work is dropped,
	// as its connections are being closed.
	start func(worker func()) bool

	mu      sync.Mutex
	queue   []func()
	head    int // queue[head:] waits
	running int
}

// submit queues f and makes sure a worker will run it.
func (p *pool) submit(f func()) {
	p.mu.Lock()
	p.queue = append(p.queue, f)
	start := p.running < runtime.GOMAXPROCS(0)
	if start {
		p.running++
	}
	p.mu.Unlock()
	if start && !p.start(p.work) {
		p.mu.Lock()
		p.running--
		p.mu.Unlock()
	}
}

// work runs queued functions until there are none.
func (p *pool) work() {
	for {
		p.mu.Lock()
		if p.head == len(p.queue) {
			p.running--
			clear(p.queue)
			p.queue, p.head = p.queue[:0], 0
			if cap(p.queue) > 1024 {
				p.queue = nil // a storm is over: give its backlog's array back
			}
			p.mu.Unlock()
			return
		}
		f := p.queue[p.head]
		p.queue[p.head] = nil
		p.head++
		if p.head >= 64 && 2*p.head >= len(p.queue) {
			// A backlog that never drains must not grow the array forever.
			n := copy(p.queue, p.queue[p.head:])
			clear(p.queue[n:])
			p.queue, p.head = p.queue[:n], 0
		}
		p.mu.Unlock()
		f()
	}
}
