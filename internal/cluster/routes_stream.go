package cluster

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The route streams: to each live peer one Routes stream carries this node's table, a
// snapshot first, then deltas; the peer answers each update with the version its remote
// index holds.

// routeDelta is one change of the table waiting for a link's stream.
type routeDelta struct {
	filter  string
	remove  bool
	version uint64
}

// A routeLink streams this node's routes to one peer.
type routeLink struct {
	r      *routes
	name   string
	ctx    context.Context // cancelled by stop: the peer is gone
	cancel context.CancelFunc
	wake   chan struct{}

	// Guarded by r.mu.
	started bool
	acked   uint64       // the version the peer acknowledged on the current stream
	pending []routeDelta // changes not yet sent
	resnap  bool         // send a snapshot: pending overflowed
}

func newRouteLink(r *routes, name string) *routeLink {
	ctx, cancel := context.WithCancel(r.c.ctx)
	return &routeLink{r: r, name: name, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
}

// queueLocked adds a change for the stream. r.mu is held.
func (l *routeLink) queueLocked(filter string, remove bool, version uint64) {
	switch {
	case l.resnap:
	case len(l.pending) >= routeDeltaMax:
		clear(l.pending)
		l.pending, l.resnap = nil, true
	default:
		l.pending = append(l.pending, routeDelta{filter: filter, remove: remove, version: version})
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// start runs the link's goroutine once.
func (l *routeLink) start() {
	l.r.mu.Lock()
	if l.started {
		l.r.mu.Unlock()
		return
	}
	l.started = true
	l.r.mu.Unlock()
	l.r.c.spawn("cluster routes", l.loop)
}

// stop ends the link.
func (l *routeLink) stop() { l.cancel() }

// loop keeps a stream to the peer until the link stops, dialling again with backoff.
func (l *routeLink) loop(ctx context.Context) {
	l.r.c.keepStream(ctx, l.ctx, l.name, "route", l.stream)
}

// stream runs one Routes stream: the snapshot, then the deltas as they come, while a
// second goroutine reads the acknowledgements.
func (l *routeLink) stream(ctx context.Context) error {
	c := l.r.c
	cl, err := c.liveClient(l.name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := cl.Routes(ctx)
	if err != nil {
		return err
	}
	r := l.r
	add, version := r.snapshot(func() {
		l.acked = 0 // a new stream: the peer may be a new process without our table
		clear(l.pending)
		l.pending, l.resnap = l.pending[:0], false
	})
	if err := st.Send(&clusterpb.RouteUpdate{Node: c.cfg.NodeName, Version: version, Snapshot: true, Add: add}); err != nil {
		return err
	}
	acks := make(chan error, 1)
	if !c.spawn("cluster routes acks", func(context.Context) { acks <- l.readAcks(st) }) {
		return errClosed
	}
	var pending []routeDelta
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-acks:
			return err
		case <-l.wake:
		}
		r.mu.Lock()
		resnap := l.resnap
		pending, l.pending = l.pending, pending[:0]
		r.mu.Unlock()
		var u *clusterpb.RouteUpdate
		if resnap { // the deltas overflowed: the whole table again
			add, version := r.snapshot(func() {
				clear(l.pending)
				l.pending, l.resnap = l.pending[:0], false
			})
			u = &clusterpb.RouteUpdate{Snapshot: true, Add: add, Version: version}
		}
		if u == nil {
			if len(pending) == 0 {
				continue
			}
			u = &clusterpb.RouteUpdate{Version: pending[len(pending)-1].version}
			u.Add, u.Remove = netDeltas(pending)
		}
		clear(pending)
		if err := st.Send(u); err != nil {
			return err
		}
	}
}

// netDeltas returns what pending changes in the table the peer holds: the filters it
// lacks and will have, and those it has and will lack. A filter's changes alternate (the
// table adds only a filter it lacks and removes only one it has), so its first change
// says what the peer holds, its last what it will: a filter removed and added again in
// one batch is not sent, which keeps every add one of a filter the peer lacks
// (routes_exact.go counts on it). The peer applies adds, then removes.
func netDeltas(pending []routeDelta) (add, remove []string) {
	type change struct{ first, last bool } // removes
	net := make(map[string]change, len(pending))
	for _, d := range pending {
		c, ok := net[d.filter]
		if !ok {
			c.first = d.remove
		}
		c.last = d.remove
		net[d.filter] = c
	}
	for f, c := range net {
		switch {
		case !c.first && !c.last:
			add = append(add, f)
		case c.first && c.last:
			remove = append(remove, f)
		}
	}
	return add, remove
}

// readAcks records the peer's acknowledgements until the stream ends.
func (l *routeLink) readAcks(st clusterpb.Cluster_RoutesClient) error {
	r := l.r
	for {
		a, err := st.Recv()
		if err != nil {
			return err
		}
		r.mu.Lock()
		if r.links[l.name] == l && a.Version > l.acked {
			l.acked = a.Version
		}
		r.mu.Unlock()
		r.settle()
	}
}

var routeStreams atomic.Uint64

// Routes serves a peer's route stream: its table into the remote index, acknowledged
// version by version, until the table is dropped (gone) or a newer stream of the peer
// takes it, either of which ends the stream.
func (s rpcServer) Routes(st clusterpb.Cluster_RoutesServer) error {
	r := s.c.routes
	u, err := st.Recv()
	if err != nil {
		return err
	}
	name := u.Node
	if _, ok := s.c.ms.lookup(name); !ok || name == s.c.cfg.NodeName {
		return status.Errorf(codes.Unavailable, "cluster: %q is not a live member here", name)
	}
	if !u.Snapshot {
		return status.Error(codes.FailedPrecondition, "cluster: a route stream starts with a snapshot")
	}
	ctx, end := context.WithCancel(st.Context())
	defer end()
	id := routeStreams.Add(1)
	r.own(name, id, end)
	s.c.fwd.link(name) // its routes are about to be matched
	updates := make(chan *clusterpb.RouteUpdate)
	recvErr := make(chan error, 1)
	go func() { // ends with the stream, which ends when this handler returns
		for {
			u, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case updates <- u:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		if !r.apply(name, id, u.Snapshot, u.Add, u.Remove, u.Version) {
			return errRoutesDropped(name)
		}
		if err := st.Send(&clusterpb.RouteAck{Version: u.Version}); err != nil {
			return err
		}
		select {
		case u = <-updates:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return errRoutesDropped(name)
		}
	}
}

// errRoutesDropped ends a peer's route stream whose table was dropped (gone) or taken by
// a newer stream: the peer dials again and sends a snapshot.
func errRoutesDropped(name string) error {
	return status.Errorf(codes.Aborted, "cluster: the routes of %s were dropped (gone) or taken by a newer stream", name)
}
