package broker

import (
	"sync"

	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// Hard memory pressure: publishers paused
//
// At memory.Soft the broker refuses new clients and sheds QoS 0 for backed-up
// subscribers; what still grows at Hard is what publishers send faster than it goes out.
// So at Hard a connection that sends a PUBLISH is no longer read once that round's bytes
// are handled (listener.Pauser): its next packets wait in its socket, and TCP's flow
// control then holds the publisher itself. Subscribers are still read (their PUBACKs,
// PINGREQs) and written to, so their queues drain and memory falls; a client that both
// publishes and subscribes keeps receiving. The connections stay open: the listener does
// not count a paused connection's keep alive, and starts it over when reading resumes.
// Reading resumes for every paused connection as soon as the level falls below Hard
// (memory.Policy.OnChange calls PressureChanged), which takes the level's hysteresis
// and hold (internal/memory/pressure.go), so publishers are not paused and resumed on
// every GC cycle.
//
// This is what EMQX does past its rate limits ("pause receiving client messages") and
// HiveMQ under overload protection (it stops reading from the clients that publish most);
// NATS instead cuts slow consumers off, which MQTT sessions make costly here.
//
// Ordering with a level that falls: pausePublisher re-reads the level under paused.mu,
// and PressureChanged reads it under the same lock after the level is stored, so a
// connection paused at Hard is either seen by the resume that follows or not paused.

// pausedConns is the set of connections whose reads are paused: at Hard (m), and the
// publishers held back by full queues (held, backpressure.go). A connection is read again
// once neither holds it.
type pausedConns struct {
	mu   sync.Mutex
	m    map[*client]struct{}
	held heldPublishers
}

// resumeHeldLocked reads cl again, which backpressure no longer holds back, unless it is
// paused at Hard. ps.mu is held.
func (ps *pausedConns) resumeHeldLocked(cl *client) {
	cl.held = false
	if _, hard := ps.m[cl]; !hard {
		cl.conn.(listener.Pauser).ResumeReads()
	}
}

// pausePublisher stops reading cl, which has sent a PUBLISH, if the memory pressure is
// Hard. cl.mu is held.
func (b *Broker) pausePublisher(cl *client) {
	p, ok := cl.conn.(listener.Pauser)
	if !ok {
		return
	}
	b.paused.mu.Lock()
	defer b.paused.mu.Unlock()
	if b.pressure() < memory.Hard || cl.closing {
		return
	}
	if _, ok := b.paused.m[cl]; ok {
		return
	}
	if b.paused.m == nil {
		b.paused.m = make(map[*client]struct{})
	}
	b.paused.m[cl] = struct{}{}
	p.PauseReads()
}

// PressureChanged resumes reading every connection paused at Hard once the memory
// pressure is below it. The memory policy calls it when the level changes
// (memory.Policy.OnChange).
func (b *Broker) PressureChanged() {
	b.paused.mu.Lock()
	defer b.paused.mu.Unlock()
	if len(b.paused.m) == 0 || b.pressure() >= memory.Hard {
		return
	}
	for cl := range b.paused.m {
		if !cl.held {
			cl.conn.(listener.Pauser).ResumeReads()
		}
		delete(b.paused.m, cl)
	}
}

// unpause forgets cl, closing, if it was paused or held. cl.mu is held.
func (b *Broker) unpause(cl *client) {
	b.paused.mu.Lock()
	delete(b.paused.m, cl)
	if cl.held {
		if r := b.paused.held.pubs[cl.s]; r != nil && r.cl == cl {
			b.forgetHeldLocked(cl.s, r)
		}
		cl.held = false
	}
	b.paused.mu.Unlock()
}

// Paused returns the number of connections whose reads are paused at Hard.
func (b *Broker) Paused() int {
	b.paused.mu.Lock()
	defer b.paused.mu.Unlock()
	return len(b.paused.m)
}

// pausedGauge exports Paused as bifrost_connections_paused.
func (st *stats) pausedGauge(b *Broker) error {
	if st.m == nil {
		return nil
	}
	return st.m.Register(metrics.NewGaugeFunc("bifrost_connections_paused",
		"Connections that publish whose reads are paused at hard memory pressure (TCP holds their writes).",
		func() float64 { return float64(b.Paused()) }))
}
