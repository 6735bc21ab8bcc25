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
//	client.mu → pubsub's locks (read) → Broker.idMu (read), session.Session's lock
//	Journal.commitMu → Broker.mu → session.Session's lock → Journal.mu
//	session.Session's lock → session.Sweeper's lock → sweep.mu
//	session.Session's lock → Broker.paused.mu → the connection's write lock (backpressure.go)
//	client.mu → Broker.paused.mu → the connection's write lock (pause.go)
//	Broker.retMu → pubsub's locks, Journal.mu
//	client.mu → Broker.routeMu → pubsub's locks, the cluster's route table
//	pool.mu (the auth pool) → authFailures.mu
//
// No code holds two clients' or two sessions' locks at once; idMu (the ID → session
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
type Broker struct {
	cfg     *conf.Config
	log     *slog.Logger
	limits  atomic.Pointer[limits]   // swapped by Reconfigure
	set     atomic.Pointer[settings] // the mqtt and queue sections; swapped by Reconfigure
	realms  []Security               // auth configurations by realm (initRealms)
	realmOf map[string]uint8         // listener name → realm; absent: 0
	// realmNames names each realm for the store: "" for 0, else its listener's name.
	realmNames []string
	idLog      *logging.Limiter // the discarded foreign sessions' lines (identity.go)
	// lim is what every settings snapshot shares: the counters, the sweeper and, once
	// Restore ran, the journal. The limits themselves are in set.
	lim     session.Limits
	reconf  sync.Mutex       // serializes Reconfigure; guards cfg and sysStop after Start
	sysStop chan struct{}    // closed to end the $SYS goroutine (sys.go); nil: none runs
	paused  pausedConns      // publishers paused at hard memory pressure (pause.go) or held by full queues (backpressure.go)
	drops   *logging.Limiter // the drop lines, by reason (drops.go)
	index   *pubsub.Index
	ret     *pubsub.Retained[*session.Message]
	j       *session.Journal // nil without a store (Restore)
	sweep   sweep            // drops expired messages queued for offline sessions
	retMu   sync.Mutex       // orders retained changes between memory and the Journal
	retExp  map[string]int64 // topic → expiry of its retained message, if any (retained.go); retMu
	owned   ownedQueues      // queues kept in the store by other owners: bridges (ownedqueue.go)
	net     *listener.Server
	stats   stats
	start   time.Time
	goFn    func(name string, f func(ctx context.Context)) bool
	press   func() memory.Level
	budget  *memory.Budget // never nil
	cluster Cluster        // nil: a single node
	routeMu sync.Mutex     // a cluster's: orders the index's changes with the routes told (cluster_routes.go)

	mu       sync.Mutex // guards the fields below
	sessions map[string]*session.Session
	wills    map[*session.Session]*time.Timer // wills waiting for their delay
	expiries map[*session.Session]*time.Timer // offline sessions waiting to expire
	// claims counts the CONNECTs that have claimed a session but not yet attached to it:
	// an expiry firing in between must not end the session they are about to resume.
	claims    map[*session.Session]int
	listeners []*listener.Listener
	closed    bool

	idMu  sync.RWMutex
	byID  []target // SubscriberID → recipient; 0 unused
	freeI []uint32

	own ownerState // cluster_owner.go; b.mu

	authPool  pool
	refusals  *logging.Limiter // the refusal log's rate (refusal.go)
	failures  authFailures     // the failure budget's table (authfailures.go)
	budgetLog *logging.Limiter // the rate of its "source blocked" lines
	batches   sync.Pool
	rounds    []round         // by poller: the batch of its round (listener.Batcher)
	done      chan struct{}   // closed when Close begins
	byProto   [3]atomic.Int64 // connections that completed CONNECT, by protocol: 3.1, 3.1.1, 5.0
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
		cfg:       c,
		log:       o.Logger,
		index:     pubsub.NewIndex(),
		ret:       pubsub.NewRetained[*session.Message](),
		sessions:  make(map[string]*session.Session),
		wills:     make(map[*session.Session]*time.Timer),
		expiries:  make(map[*session.Session]*time.Timer),
		claims:    make(map[*session.Session]int),
		byID:      make([]target, 1, 1024),
		goFn:      o.Go,
		press:     o.Pressure,
		budget:    o.Budget,
		cluster:   o.Cluster,
		start:     time.Now(),
		done:      make(chan struct{}),
		refusals:  newRefusalLog(),
		budgetLog: newRefusalLog(),
		idLog:     logging.NewLimiter(1, time.Second),
		drops:     newDropLog(),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.budget == nil {
		b.budget = new(memory.Budget)
	}
	if err := b.initRealms(&o); err != nil {
		return nil, err
	}
	if c.Cluster != nil {
		b.own.staleAfter = staleAfter(time.Duration(c.Cluster.Lease))
	}
	b.limits.Store(newLimits(c, new(atomic.Int64), nil))
	b.stats.init(o.Metrics)
	if err := b.stats.pausedGauge(b); err != nil {
		return nil, err
	}
	if err := b.stats.heldMetrics(b); err != nil {
		return nil, err
	}
	b.lim = session.Limits{
		SlowBytes: slowBytes(c),
		Pressed:   func() bool { return b.pressure() >= memory.Soft },
		Sent:      &b.stats.sent,
		BytesSent: &b.stats.bytesSent,
		Realms:    b.realmNames,
		Drained:   b.queueDrained, // backpressure.go
	}
	for _, sec := range b.realms {
		if sec.Authorizer != nil {
			b.lim.MayRead = b.mayRead // without any ACL, nothing to check
		}
	}
	b.initSweep(time.Duration(c.Queue.ExpirySweep))
	b.set.Store(newSettings(c, &b.lim))
	b.batches.New = func() any { return new(batch) }
	b.authPool.start = func(worker func()) bool {
		return b.goRoutine("auth", func(context.Context) { worker() })
	}
	b.authPool.admit = b.admitCheck
	b.net = listener.New(b, listener.Options{
		ConnectTimeout:   time.Duration(c.MQTT.ConnectTimeout),
		MaxTLSHandshakes: c.Limits.MaxTLSHandshakes,
		Logger:           b.log,
		Admit:            b.admitAccepted,
		DrainedAt:        b.lim.SlowBytes, // a session held back by it may write again (OnDrained)
		WriteFence:       writeFence(o.Cluster),
	})
	b.rounds = make([]round, b.net.Pollers())
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
	for _, lc := range b.cfg.Listeners {
		l, err := b.net.Listen(lc)
		if err != nil {
			return fmt.Errorf("broker: listener %s (%s %s): %w", lc.Name, lc.Type, lc.Address, err)
		}
		b.mu.Lock()
		b.listeners = append(b.listeners, l)
		b.mu.Unlock()
		b.log.Info("mqtt listening", "listener", l.Name(), "type", l.Type(), "addr", l.Addr().String())
	}
	if iv := b.cfg.SysInterval; iv != nil && *iv > 0 {
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
	for _, s := range b.sessions {
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
	for s, t := range b.wills {
		t.Stop()
		delete(b.wills, s)
	}
	for s, t := range b.expiries {
		t.Stop()
		delete(b.expiries, s)
	}
	b.mu.Unlock()
	// What the closing connections staged (sessions gone offline, wills published).
	b.commitWait()
	return err
}

// Clients is the number of connected clients.
func (b *Broker) Clients() int {
	return int(b.byProto[0].Load() + b.byProto[1].Load() + b.byProto[2].Load())
}

// lookup returns the recipient of a SubscriberID; the caller holds idMu for reading.
func (b *Broker) lookup(id pubsub.SubscriberID) target {
	if int(id) < len(b.byID) {
		return b.byID[id]
	}
	return target{}
}

// allocID reserves a SubscriberID for t.
func (b *Broker) allocID(t target) uint32 {
	b.idMu.Lock()
	defer b.idMu.Unlock()
	if n := len(b.freeI); n > 0 {
		id := b.freeI[n-1]
		b.freeI = b.freeI[:n-1]
		b.byID[id] = t
		return id
	}
	b.byID = append(b.byID, t)
	return uint32(len(b.byID) - 1)
}

// setTarget fills in the session of an ID reserved before the session existed.
func (b *Broker) setTarget(id uint32, t target) {
	b.idMu.Lock()
	b.byID[id] = t
	b.idMu.Unlock()
}

func (b *Broker) freeID(id uint32) {
	b.idMu.Lock()
	b.byID[id] = target{}
	b.freeI = append(b.freeI, id)
	b.idMu.Unlock()
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
	if b.press == nil {
		return memory.None
	}
	return b.press()
}

// ReloadTLS reloads the certificates of the tls and wss listeners from their files.
func (b *Broker) ReloadTLS() error { return b.net.ReloadTLS() }
