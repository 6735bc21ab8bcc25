package broker

import (
	"runtime"
	"sync"
)

// pool runs blocking work (password hashes, authentication hooks) off the event loops, on
// goroutines that exist only while there is work: an idle broker parks none, and a storm
// of CONNECTs queues up instead of starting a goroutine (and a stack) each.
//
// At most GOMAXPROCS-1 workers (one at least) run at once: a hash keeps a core busy for
// tens of milliseconds, and with every P hashing, a poller coming back from epoll_wait
// waits for the scheduler to preempt one (10 ms or more) before it can serve any client.
// One P stays free for the pollers.
//
// The work is queued by source (a lane each; authfailures.go), and the workers serve the
// lanes that have work in turn, one job each, oldest lane first: a login from one source
// waits behind at most one job of each other source with work, however many
// connections another source keeps queued. Within a lane, jobs run in the order
// submitted. Before a lane's next job starts, admit (the failure budget) may hold it
// until one of the lane's running jobs ends, or refuse it: the job then runs at once
// with refused set, to answer its client without doing the work.
type pool struct {
	// start runs a worker on a goroutine of the broker's (counted, labelled, waited for
	// by Close), and reports false once the broker is closing: then the work is dropped,
	// as its connections are being closed.
	start func(worker func()) bool
	// admit is the failure budget's verdict on a lane's next job, with running of the
	// lane's jobs in flight; called under mu. Nil: every job runs.
	admit func(src source, running int) verdict

	mu      sync.Mutex
	lanes   map[source]*lane
	ready   fifo[*lane] // lanes with a job that may be runnable, each once
	workers int
}

// A job is one piece of work; refused: answer without doing it (the source is blocked).
type job func(refused bool)

// A lane is one source's queued work.
type lane struct {
	src     source
	jobs    fifo[job]
	running int  // jobs of this lane running now
	ready   bool // in pool.ready
}

// poolWorkers is the most workers that run at once.
func poolWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// submit queues f in src's lane and makes sure a worker will run it.
func (p *pool) submit(src source, f job) {
	p.mu.Lock()
	l := p.lanes[src]
	if l == nil {
		if p.lanes == nil {
			p.lanes = make(map[source]*lane)
		}
		l = &lane{src: src}
		p.lanes[src] = l
	}
	l.jobs.push(f)
	p.requeue(l)
	start := p.workers < poolWorkers()
	if start {
		p.workers++
	}
	p.mu.Unlock()
	if start && !p.start(p.work) {
		p.mu.Lock()
		p.workers--
		p.mu.Unlock()
	}
}

// work runs jobs until none may run.
func (p *pool) work() {
	p.mu.Lock()
	for {
		l, f, refused := p.next()
		if f == nil {
			p.workers--
			p.ready.shrink()
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		f(refused)
		p.mu.Lock()
		if !refused {
			l.running--
			p.requeue(l)
		}
	}
}

// next takes the next job to run, from the first ready lane whose job admit lets run or
// refuses; a lane admit holds leaves the ready list until one of its jobs ends. Lock
// held.
func (p *pool) next() (*lane, job, bool) {
	for p.ready.len() > 0 {
		l := p.ready.pop()
		l.ready = false
		v := verdictCheck
		if p.admit != nil {
			v = p.admit(l.src, l.running)
		}
		if v == verdictWait {
			continue // a running job of l requeues it when it ends
		}
		f := l.jobs.pop()
		if v == verdictCheck {
			l.running++
		}
		p.requeue(l)
		return l, f, v == verdictBlock
	}
	return nil, nil, false
}

// requeue puts l at the back of the ready list if it has jobs and is not on it, and
// forgets it once it has neither jobs queued nor running. Lock held.
func (p *pool) requeue(l *lane) {
	switch {
	case l.jobs.len() > 0:
		if !l.ready {
			l.ready = true
			p.ready.push(l)
		}
	case l.running == 0 && !l.ready:
		delete(p.lanes, l.src)
	}
}

// A fifo is a queue on a slice that reuses its array and gives a storm's back.
type fifo[T any] struct {
	q    []T
	head int // q[head:] waits
}

func (f *fifo[T]) len() int { return len(f.q) - f.head }

func (f *fifo[T]) push(v T) { f.q = append(f.q, v) }

// pop takes the oldest element; the fifo must not be empty.
func (f *fifo[T]) pop() T {
	var zero T
	v := f.q[f.head]
	f.q[f.head] = zero
	f.head++
	switch {
	case f.head == len(f.q):
		f.q, f.head = f.q[:0], 0
	case f.head >= 64 && 2*f.head >= len(f.q):
		// A backlog that never drains must not grow the array forever.
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
	}
	return v
}

// shrink gives back the array of an empty fifo after a storm.
func (f *fifo[T]) shrink() {
	if f.len() == 0 && cap(f.q) > 1024 {
		f.q, f.head = nil, 0
	}
}
