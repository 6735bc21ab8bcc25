package auth

import (
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// gateWait bounds how long a CONNECT waits at a closed Gate: less than the default
// connect_timeout, so that the client is told why.
const gateWait = 5 * time.Second

// A Gate holds the CONNECTs of a cluster node until it enforces the cluster's auth files
// (the server opens it once the cluster's files are in force); until then a CONNECT waits
// on the auth pool, and after gateWait is refused with Server unavailable rather than
// judged by files the cluster may have replaced. Open, it costs a receive from a closed
// channel per CONNECT.
type Gate struct {
	set    *Set
	opened chan struct{} // closed by Open
	once   sync.Once
}

// NewGate returns a closed gate in front of set.
func NewGate(set *Set) *Gate {
	return &Gate{set: set, opened: make(chan struct{})}
}

// Open opens the gate; a nil gate (an embedder's Authenticator decides) is always open.
func (g *Gate) Open() {
	if g != nil {
		g.once.Do(func() { close(g.opened) })
	}
}

// IsOpen reports whether the gate is open.
func (g *Gate) IsOpen() bool {
	if g == nil {
		return true
	}
	select {
	case <-g.opened:
		return true
	default:
		return false
	}
}

// wait returns nil once the gate is open, or Server unavailable after gateWait.
func (g *Gate) wait() error {
	if g.IsOpen() {
		return nil
	}
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case <-g.opened:
		return nil
	case <-t.C:
		return packet.ServerUnavailable
	}
}

// Authenticate decides a CONNECT once the gate is open.
func (g *Gate) Authenticate(r *Request) (Result, error) {
	if err := g.wait(); err != nil {
		return Result{}, err
	}
	return g.set.Authenticate(r)
}

// TryAuthenticate defers to Authenticate while the gate is closed.
func (g *Gate) TryAuthenticate(r *Request) (res Result, err error, ok bool) {
	if !g.IsOpen() {
		return Result{}, nil, false
	}
	return g.set.TryAuthenticate(r)
}

// Methods wraps the set's enhanced authentication methods: an exchange starts once the
// gate is open, on the state then in force.
func (g *Gate) Methods(ms []Method) []Method {
	if ms == nil {
		return nil
	}
	out := make([]Method, len(ms))
	for i, m := range ms {
		out[i] = gateMethod{g: g, m: m}
	}
	return out
}

type gateMethod struct {
	g *Gate
	m Method
}

func (m gateMethod) Name() string { return m.m.Name() }

func (m gateMethod) Start(r *Request) Exchange {
	if m.g.IsOpen() {
		return m.m.Start(r)
	}
	x := &gateExchange{m: m}
	if r != nil {
		x.r, x.hasReq = *r, true
		x.r.Password = nil // lent by the broker; the methods do not read it
	}
	return x
}

// gateExchange starts the method's exchange at its first step, on the auth pool.
type gateExchange struct {
	m      gateMethod
	r      Request
	hasReq bool
	x      Exchange
}

func (x *gateExchange) Step(in []byte) (out []byte, done bool, res Result, err error) {
	if x.x == nil {
		if err := x.m.g.wait(); err != nil {
			return nil, false, Result{}, err
		}
		var r *Request
		if x.hasReq {
			r = &x.r
		}
		x.x = x.m.m.Start(r)
	}
	return x.x.Step(in)
}

var (
	_ Authenticator = (*Gate)(nil)
	_ Quick         = (*Gate)(nil)
)
