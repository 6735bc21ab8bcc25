// Package broker wires bifrost's parts into an MQTT broker: the listeners feed bytes to
// per-connection clients, clients drive their sessions, the publish path matches topics in
// the pubsub index and hands messages to the sessions that subscribed.
//
// # Goroutines
//
// The broker starts no goroutine per connection. Packets are handled on the listener's
// poller goroutine that read them (OnRoundData), and the writes they cause are batched per
// destination session and flushed, and what they staged for the store committed, when the
// poller ends its round of events (EndRound); packets that arrive off the pollers (a TLS
// handshake goroutine, the portable engine, the auth pool) use a batch that ends with
// their call (OnData, endBatch). Timers exist only for
// sessions that have no connection: a will waiting for its delay and a session waiting to
// expire (time.AfterFunc, which parks no goroutine), one broker-wide timer that sweeps
// expired messages from offline queues while there are any (sweep.go), and one that checks
// the full queues holding publishers back while there are any (backpressure.go). One goroutine
// publishes $SYS. With a store, acknowledgements held for it are written by the store's
// committer goroutine (persist.go).
//
// # Lock order
//
//	client.mu → Broker.mu (session registry) → session.Session's lock → Journal.mu
//	client.mu → session.Session's lock → the connection's write lock (Session.Flush)
//	client.mu → pubsub's locks (read) → Broker.ids.mu (read), session.Session's lock
//	Journal.commitMu → Broker.mu → session.Session's lock → Journal.mu
//	session.Session's lock → session.Sweeper's lock → sweep.mu
//	session.Session's lock → Broker.paused.mu → the connection's write lock (backpressure.go)
//	client.mu → Broker.paused.mu → the connection's write lock (pause.go)
//	Broker.retained.mu → pubsub's locks, Journal.mu
//	client.mu → Broker.routeMu → pubsub's locks, the cluster's route table
//	pool.mu (the auth pool) → authFailures.mu
//
// No code holds two clients' or two sessions' locks at once; ids.mu (the ID → session
// table) is a leaf. Journal.Commit (commitMu) is called with no lock held: it may block
// on the store's queue, and the store's callbacks take session locks. The whole picture,
// with the listener's locks: docs/architecture.md.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Options configure a Broker.
type Options struct {
	Config  *conf.Config // validated, defaults filled
	Logger  *slog.Logger
	Metrics *metrics.Registry // may be nil
	// Security decides who connects and what they may touch; the zero value allows
	// everything. Listeners maps a listener's name to the Security that applies to its
	// clients instead (a listener with its own auth block).
	Security  Security
	Listeners map[string]Security
	// Go starts a long-lived goroutine with a name (the embedding Broker counts them);
	// nil uses the go statement.
	Go func(name string, f func(ctx context.Context)) bool
	// Pressure reports the memory pressure (memory.Policy.Pressure); nil: never any.
	Pressure func() memory.Level
	// Budget counts the bytes of every PUBLISH read, so that the level rises between two
	// samples of Pressure (memory.Policy.Attach); nil: a budget attached to nothing.
	Budget *memory.Budget
	// Cluster is the cluster this node is part of (cluster.go); nil: a single node.
	Cluster Cluster
}

// A Broker is a running MQTT broker. Its methods are safe for concurrent use.
//
// Its fields are its parts: a part of more than one field is a struct declared in the
// part's file, whose comment says what it holds and what guards it.
type Broker struct {
	log     *slog.Logger
	net     *listener.Server // the listeners' engine, which calls OnOpen, OnData, ...
	cluster Cluster          // nil: a single node (cluster.go)
	mem     memoryHooks      // Options.Pressure and Budget
	start   time.Time        // when New ran: the origin of uptime and of the rate buckets
	done    chan struct{}    // closed when Close begins
	// goFn is Options.Go; nil: the go statement (goRoutine).
	goFn func(name string, f func(ctx context.Context)) bool

	live   liveConfig     // the configuration in force and Reconfigure's lock (reconfigure.go)
	realms realms         // the auth configurations, by realm (auth.go)
	auth   authentication // the auth pool, the failure budget and their log lines (auth.go)
	stats  stats          // the running totals (stats.go)

	index    *pubsub.Index    // the subscriptions (subscribe.go)
	routeMu  sync.Mutex       // a cluster's: orders the index's changes with the routes told (cluster_routes.go)
	ids      idTable          // what each SubscriberID of the index names
	retained retainedMessages // retained.go
	j        *session.Journal // nil without a store (persist.go, Restore)
	owned    ownedQueues      // queues kept in the store by other owners: bridges (ownedqueue.go)
	sweep    sweep            // drops expired messages queued for offline sessions (sweep.go)
	paused   pausedConns      // publishers paused at hard memory pressure (pause.go) or held by full queues (backpressure.go)
	drops    *logging.Limiter // the drop lines, by reason (drops.go)
	batches  batches          // the pollers' rounds and the batches off them (client.go)

	mu        sync.Mutex   // guards the fields below
	sessions  sessionTable // by client id, with the wills, expiries and claims waiting on them (lifecycle.go)
	own       ownerState   // a cluster's claims of client ids (cluster_owner.go)
	listeners []*listener.Listener
	closed    bool
}

// memoryHooks are Options.Pressure and Options.Budget; set by New.
type memoryHooks struct {
	press  func() memory.Level // nil: never any pressure
	budget *memory.Budget      // never nil
}

// idTable names the recipient of each SubscriberID the pubsub index holds; mu guards it
// and is a leaf, taken for reading on every delivery (lookup).
type idTable struct {
	mu      sync.RWMutex
	targets []target // by SubscriberID; 0 unused
	free    []uint32 // IDs freed, for allocID to reuse
}

// target is what a SubscriberID names: a session, or an in-process subscriber (tap.go).
type target struct {
	s   *session.Session
	tap TapFunc
}

// New builds a broker from a validated config. It serves nothing until Start.
func New(o Options) (*Broker, error) {
	c := o.Config
	if c == nil {
		return nil, errors.New("broker: no config")
	}
	b := &Broker{
		live:     liveConfig{cfg: c},
		log:      o.Logger,
		index:    pubsub.NewIndex(),
		retained: retainedMessages{tree: pubsub.NewRetained[*session.Message]()},
		sessions: newSessionTable(),
		ids:      idTable{targets: make([]target, 1, 1024)},
		goFn:     o.Go,
		mem:      memoryHooks{press: o.Pressure, budget: o.Budget},
		cluster:  o.Cluster,
		start:    time.Now(),
		done:     make(chan struct{}),
		auth:     authentication{refusals: newRefusalLog(), budgetLog: newRefusalLog()},
		realms:   realms{idLog: logging.NewLimiter(1, time.Second)},
		drops:    newDropLog(),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.mem.budget == nil {
		b.mem.budget = new(memory.Budget)
	}
	if err := b.initRealms(&o); err != nil {
		return nil, err
	}
	if c.Cluster != nil {
		b.own.staleAfter = staleAfter(time.Duration(c.Cluster.Lease))
	}
	b.live.limits.Store(newLimits(c, new(atomic.Int64), nil))
	b.stats.init(o.Metrics)
	if err := b.stats.pausedGauge(b); err != nil {
		return nil, err
	}
	if err := b.stats.heldMetrics(b); err != nil {
		return nil, err
	}
	b.live.lim = session.Limits{
		SlowBytes: slowBytes(c),
		Pressed:   func() bool { return b.pressure() >= memory.Soft },
		Sent:      &b.stats.sent,
		BytesSent: &b.stats.bytesSent,
		Realms:    b.realms.names,
		Drained:   b.queueDrained, // backpressure.go
	}
	for _, sec := range b.realms.sec {
		if sec.Authorizer != nil {
			b.live.lim.MayRead = b.mayRead // without any ACL, nothing to check
		}
	}
	b.initSweep(time.Duration(c.Queue.ExpirySweep))
	b.live.set.Store(newSettings(c, &b.live.lim))
	b.batches.pool.New = func() any { return new(batch) }
	b.auth.pool.start = func(worker func()) bool {
		return b.goRoutine("auth", func(context.Context) { worker() })
	}
	b.auth.pool.admit = b.admitCheck
	b.net = listener.New(b, listener.Options{
		ConnectTimeout:   time.Duration(c.MQTT.ConnectTimeout),
		MaxTLSHandshakes: c.Limits.MaxTLSHandshakes,
		Logger:           b.log,
		Admit:            b.admitAccepted,
		DrainedAt:        b.live.lim.SlowBytes, // a session held back by it may write again (OnDrained)
		WriteFence:       writeFence(o.Cluster),
	})
	b.batches.rounds = make([]round, b.net.Pollers())
	if o.Metrics != nil {
		if err := o.Metrics.Register(newTLSCollector(b.net)); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
	}
	return b, nil
}

// slowBytes derives the QoS 0 shedding threshold from the online queue bound: the bytes
// of that many average (1 KiB) messages, at least 64 KiB so a burst of small messages is
// never shed.
func slowBytes(c *conf.Config) int {
	return max(c.Queue.OnlineMessages*1024, 64<<10)
}

// Start opens every configured listener. On error the listeners opened so far stay open;
// Close them with Close.
func (b *Broker) Start() error {
	for _, lc := range b.live.cfg.Listeners {
		l, err := b.net.Listen(lc)
		if err != nil {
			return fmt.Errorf("broker: listener %s (%s %s): %w", lc.Name, lc.Type, lc.Address, err)
		}
		b.mu.Lock()
		b.listeners = append(b.listeners, l)
		b.mu.Unlock()
		b.log.Info("mqtt listening", "listener", l.Name(), "type", l.Type(), "addr", l.Addr().String())
	}
	if iv := b.live.cfg.SysInterval; iv != nil && *iv > 0 {
		b.startSys(time.Duration(*iv))
	}
	return nil
}

// Listeners returns the open listeners, in config order.
func (b *Broker) Listeners() []*listener.Listener {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*listener.Listener(nil), b.listeners...)
}

// Close stops accepting, closes every connection (sending v5 clients DISCONNECT 0x8B,
// server shutting down, and publishing the wills that a connection loss publishes), and
// stops the timers. Idempotent.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	var online []*session.Session
	for _, s := range b.sessions.m {
		if s.Online() {
			online = append(online, s)
		}
	}
	b.mu.Unlock()
	b.stopSweep()
	b.stopHold()
	// Acknowledgements waiting for the store go out before the connections close.
	b.commitWait()
	for _, s := range online {
		s.Disconnect(packet.ServerShuttingDown)
	}
	err := b.net.Close()
	b.mu.Lock()
	for s, t := range b.sessions.wills {
		t.Stop()
		delete(b.sessions.wills, s)
	}
	for s, t := range b.sessions.expiries {
		t.Stop()
		delete(b.sessions.expiries, s)
	}
	b.mu.Unlock()
	// What the closing connections staged (sessions gone offline, wills published).
	b.commitWait()
	return err
}

// Clients is the number of connected clients.
func (b *Broker) Clients() int {
	return int(b.stats.byProto[0].Load() + b.stats.byProto[1].Load() + b.stats.byProto[2].Load())
}

// lookup returns the recipient of a SubscriberID; the caller holds ids.mu for reading.
func (b *Broker) lookup(id pubsub.SubscriberID) target {
	if int(id) < len(b.ids.targets) {
		return b.ids.targets[id]
	}
	return target{}
}

// allocID reserves a SubscriberID for t.
func (b *Broker) allocID(t target) uint32 {
	b.ids.mu.Lock()
	defer b.ids.mu.Unlock()
	if n := len(b.ids.free); n > 0 {
		id := b.ids.free[n-1]
		b.ids.free = b.ids.free[:n-1]
		b.ids.targets[id] = t
		return id
	}
	b.ids.targets = append(b.ids.targets, t)
	return uint32(len(b.ids.targets) - 1)
}

// setTarget fills in the session of an ID reserved before the session existed.
func (b *Broker) setTarget(id uint32, t target) {
	b.ids.mu.Lock()
	b.ids.targets[id] = t
	b.ids.mu.Unlock()
}

func (b *Broker) freeID(id uint32) {
	b.ids.mu.Lock()
	b.ids.targets[id] = target{}
	b.ids.free = append(b.ids.free, id)
	b.ids.mu.Unlock()
}

// goRoutine starts a goroutine through Options.Go, so the embedder counts it, and
// reports false if it did not (the embedder is closing).
func (b *Broker) goRoutine(name string, f func(ctx context.Context)) bool {
	if b.goFn != nil {
		return b.goFn(name, f)
	}
	go f(context.Background())
	return true
}

// pressure is the current memory pressure level.
func (b *Broker) pressure() memory.Level {
	if b.mem.press == nil {
		return memory.None
	}
	return b.mem.press()
}

// ReloadTLS reloads the certificates of the tls and wss listeners from their files.
func (b *Broker) ReloadTLS() error { return b.net.ReloadTLS() }
