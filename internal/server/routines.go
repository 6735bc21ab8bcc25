package server

import (
	"context"
	"runtime/pprof"
	"sync"
)

// routines starts every goroutine the broker runs, so that each is counted (Close waits
// for all of them) and labelled (a goroutine profile shows bifrost=<name> for each), and
// so that none starts once Close has begun.
type routines struct {
	ctx     context.Context // the broker's; cancelled by Close
	mu      sync.Mutex      // guards running and wg.Add against wait
	running bool
	wg      sync.WaitGroup
}

func (r *routines) init(ctx context.Context) {
	r.ctx = ctx
	r.running = true
}

// start runs f(ctx) in a new goroutine labelled name, with the broker's context, and
// reports whether it did: after wait has begun it does not.
func (r *routines) start(name string, f func(ctx context.Context)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		pprof.Do(r.ctx, pprof.Labels("bifrost", name), f)
	}()
	return true
}

// wait stops new goroutines from starting and waits for the running ones to return.
func (r *routines) wait() {
	r.mu.Lock()
	r.running = false
	r.mu.Unlock()
	r.wg.Wait()
}
