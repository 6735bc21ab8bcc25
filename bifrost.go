// Package bifrost embeds the bifrost MQTT broker in a Go program: build a Broker from a
// Config, Start it, publish and subscribe in-process, Close it. The bifrost binary
// (cmd/bifrost) is a thin shell around the same API.
package bifrost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/bridge"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/httplink"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// Errors returned by Start.
var (
	ErrStarted = errors.New("bifrost: broker already started")
	ErrClosed  = errors.New("bifrost: broker closed")
	// ErrNotStarted is returned by Reconfigure before Start.
	ErrNotStarted = errors.New("bifrost: broker not started")
)

// shutdownGrace bounds how long Close waits for HTTP requests in flight.
const shutdownGrace = 5 * time.Second

// A Broker is one bifrost instance. Its methods are safe for concurrent use.
type Broker struct {
	cfg     *conf.Config // New's own copy, read-only after New
	log     *slog.Logger
	metrics *metrics.Registry

	// ctx is the parent of everything the broker runs; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex // guards the fields below
	started bool
	closed  bool
	http    httplink.Server // nil before Start and when http.address is off
	mqtt    *broker.Broker
	bridges *bridge.Set                   // nil before Start and without bridges
	cluster clusterlink.Node              // nil without a cluster block (cluster.go)
	store   store.Store                   // nil before Start and when store.dir is off
	memory  *memory.Policy                // nil before Start
	policy  atomic.Pointer[memory.Policy] // memory, for the connection paths without b.mu
	budget  *memory.Budget                // the publish path's intake, attached to memory

	routines routines

	auth        *auth.Set // the configuration's auth blocks, for ReloadFiles
	gate        *authGate // a cluster node's CONNECTs wait for the cluster's auth files; nil: none
	hook        Authenticator
	hookMethods []AuthMethod

	// Live reconfiguration (reconfigure.go).
	reconf  sync.Mutex                       // serializes Reconfigure
	running atomic.Pointer[conf.Config]      // the configuration in force: cfg with the live changes since
	file    string                           // WithConfigFile: what Reload reads
	level   *slog.LevelVar                   // the logger's level; nil: an embedder's logger, left alone
	admin   atomic.Pointer[auth.AdminAccess] // the admin API's users and tokens; nil: the API is off
}

// An Option changes how New builds a Broker.
type Option func(*Broker)

// WithLogger makes the broker log to l instead of to stderr as cfg.Log describes.
func WithLogger(l *slog.Logger) Option {
	return func(b *Broker) { b.log = l }
}

// New returns a Broker for cfg, not yet started. A nil cfg means DefaultConfig(). New works
// on a copy, with unset fields filled by their defaults, and reports every invalid field at
// once; the caller may change or reuse cfg afterwards. A cfg whose HTTP.Address is not
// HTTPOff needs the endpoint linked (import _ "github.com/bifrost-mqtt/bifrost/endpoint"),
// and a cluster block the cluster; New refuses either without it, naming the import.
func New(cfg *Config, opts ...Option) (*Broker, error) {
	if cfg == nil {
		cfg = conf.Default()
	}
	cfg = cfg.Clone()
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bifrost: invalid config:\n%w", err)
	}
	if cfg.HTTP.Address != conf.HTTPOff && !httplink.Linked() {
		return nil, fmt.Errorf("bifrost: %w", httplink.ErrNotLinked)
	}
	b := &Broker{cfg: cfg, budget: new(memory.Budget)}
	for _, opt := range opts {
		opt(b)
	}
	if b.log == nil {
		b.log, b.level = logging.New(cfg.Log, os.Stderr)
	}
	b.running.Store(cfg)
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.routines.init(b.ctx)
	b.metrics = metrics.New(b.loadInput)
	sec, own, err := b.security()
	if err != nil {
		return nil, fmt.Errorf("bifrost: %w", err)
	}
	if b.cluster, err = b.newCluster(cfg); err != nil {
		return nil, fmt.Errorf("bifrost: %w", err)
	}
	bo := broker.Options{Config: cfg, Logger: b.log, Metrics: b.metrics, Go: b.routines.start,
		Pressure: b.pressure, Budget: b.budget, Security: sec, Listeners: own}
	if b.cluster != nil { // a nil Node must not become a non-nil interface
		bo.Cluster = b.cluster
	}
	mqtt, err := broker.New(bo)
	if err != nil {
		return nil, fmt.Errorf("bifrost: %w", err)
	}
	b.mqtt = mqtt
	return b, nil
}

// Start opens the store and restores what it holds (unless store.dir is off), starts the
// cluster part (with a cluster block: membership, the rpc port and Raft; the cluster
// forms in the background), then starts the bridges (each connects to its remote in the
// background), opens the MQTT listeners and opens the HTTP endpoint. It
// returns once they accept connections (Addrs and HTTPAddr are then set) or with the
// error that prevented it (a store that is corrupt, foreign or locked by another process
// among them); after an error, Close the Broker. ctx bounds the start only: the broker
// runs until Close. With the edge profile, Start then hands the executable's start-up
// pages back to the kernel (memory.ReleaseCode): in the whole process, on Linux.
func (b *Broker) Start(ctx context.Context) error {
	if err := b.start(ctx); err != nil {
		return err
	}
	if b.cfg.Memory.Profile == conf.ProfileEdge {
		n, err := memory.ReleaseCode()
		b.log.Debug("memory: executable's pages released", "advised_bytes", n, "err", err)
	}
	return nil
}

func (b *Broker) start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return ErrClosed
	case b.started:
		return ErrStarted
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bifrost: start: %w", err)
	}
	b.started = true

	// The memory policy is process-wide (the GC's limit and percent); Close restores it.
	pol, err := memory.Apply(b.cfg.Memory, b.log)
	if err != nil {
		return fmt.Errorf("bifrost: %w", err)
	}
	b.memory = pol
	b.policy.Store(pol)
	pol.OnChange(b.mqtt.PressureChanged) // resumes the publishers paused at hard
	pol.Attach(b.budget)                 // raises the level between samples
	if err := b.metrics.Register(pol.Collector()); err != nil {
		return fmt.Errorf("bifrost: %w", err)
	}
	pol.Start(b.routines.start)

	// Everything stored is back before a listener accepts a client.
	if b.cfg.Store.Dir != conf.StoreOff {
		st, err := store.Open(b.cfg.Store, b.log)
		if err != nil {
			return fmt.Errorf("bifrost: %w", err)
		}
		b.store = st
		if c := store.Collector(st); c != nil {
			if err := b.metrics.Register(c); err != nil {
				return fmt.Errorf("bifrost: %w", err)
			}
		}
		if err := b.mqtt.Restore(st); err != nil {
			return fmt.Errorf("bifrost: %w", err)
		}
	}
	if err := b.startCluster(ctx); err != nil {
		return fmt.Errorf("bifrost: %w", err)
	}
	// The bridges' local subscriptions are in place before a client can publish: a
	// message acknowledged to a publisher that connected at once is queued for the remote.
	if len(b.cfg.Bridges) > 0 {
		set, err := bridge.Start(b.cfg.Bridges, b.mqtt, b.log, b.routines.start)
		if err != nil {
			return fmt.Errorf("bifrost: %w", err)
		}
		b.bridges = set
		if err := b.metrics.Register(set.Collector()); err != nil {
			return fmt.Errorf("bifrost: %w", err)
		}
	} else {
		bridge.DropStale(b.mqtt, b.log)
	}
	if err := b.mqtt.Start(); err != nil {
		return fmt.Errorf("bifrost: %w", err)
	}
	b.log.Info("connection cap", "max_connections", connectionCap(b.cfg), "open_file_limit_room", broker.ConnectionCap(0))
	b.advertiseMQTT()
	if b.cfg.HTTP.Address == conf.HTTPOff {
		b.log.Info("http endpoint off")
		return nil
	}
	srv, err := httplink.Listen(httplink.Env{Config: b.cfg, Logger: b.log, Metrics: b.metrics, Broker: b.mqtt,
		Cluster: b.cluster, CheckAdmin: b.checkAdmin, Reload: func() (any, error) { return b.Reload() },
		MaskedConfig: b.maskedConfig, AdminOn: b.admin.Store})
	if err != nil {
		return fmt.Errorf("bifrost: %w", err)
	}
	b.http = srv
	b.log.Info("http listening", "addr", srv.Addr().String(), "paths", srv.Paths())
	b.routines.start("http", func(ctx context.Context) {
		if err := srv.Serve(ctx); err != nil {
			b.log.Error("http endpoint stopped", "err", err)
		}
	})
	return nil
}

// Close stops the broker gracefully: each bridge sends its remote DISCONNECT and stops,
// the listeners stop accepting, every client is disconnected (MQTT 5 clients are told the
// server is shutting down), a cluster node leaves its cluster (up to about 5s while the leader takes it out), /healthz turns to
// 503, HTTP requests in flight get up to 5s to finish (long ones such as a CPU profile are
// cut short), and Close returns once every goroutine the broker started has ended.
// Close may be called more than once, and before Start; later calls return nil.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	srv := b.http
	pol := b.memory
	st := b.store
	bridges := b.bridges
	b.mu.Unlock()

	if bridges != nil {
		// First: each bridge says DISCONNECT to its remote and stops taking local messages.
		bridges.Close()
	}
	mqttErr := b.mqtt.Close()
	if b.cluster != nil {
		// After the broker, whose last wills may still cross to other nodes.
		if cerr := b.cluster.Close(); cerr != nil && mqttErr == nil {
			mqttErr = cerr
		}
	}
	if st != nil {
		// After the broker: its last commits (sessions gone offline) are made durable.
		if serr := st.Close(); serr != nil && mqttErr == nil {
			mqttErr = fmt.Errorf("store: %w", serr)
		}
	}
	// Cancelling first ends long requests (a 30s CPU profile) instead of waiting them out.
	b.cancel()
	err := mqttErr
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		if herr := srv.Shutdown(ctx); herr != nil && err == nil { // turns /healthz to 503 first
			err = herr
		}
		cancel()
		b.log.Debug("http endpoint shut down", "err", err)
	}
	b.routines.wait()
	if pol != nil {
		pol.Close()
	}
	if err != nil {
		return fmt.Errorf("bifrost: close: %w", err)
	}
	return nil
}

// HTTPAddr returns the address of the HTTP endpoint, with the port chosen when the config
// says 0; nil before Start and when the endpoint is off.
func (b *Broker) HTTPAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.http == nil {
		return nil
	}
	return b.http.Addr()
}

// Addrs returns the address of every MQTT listener, in config order, with the ports chosen
// when the config says 0; nil before Start.
func (b *Broker) Addrs() []net.Addr {
	var out []net.Addr
	for _, l := range b.mqtt.Listeners() {
		out = append(out, l.Addr())
	}
	return out
}

// Publish publishes a message from the embedding program, with the broker as publisher.
// The payload is copied; retain and QoS mean what they mean for a client's PUBLISH.
func (b *Broker) Publish(topic string, payload []byte, qos byte, retain bool) error {
	return b.mqtt.Publish(topic, payload, qos, retain)
}

// Subscribe calls fn for every message published to a topic that filter matches. fn runs
// on the publisher's network goroutine and must return quickly; it must not keep payload.
// The returned function ends the subscription.
func (b *Broker) Subscribe(filter string, fn func(topic string, payload []byte)) (unsubscribe func(), err error) {
	return b.mqtt.Subscribe(filter, fn)
}

// pressure is the memory policy's pressure level; none before Start.
func (b *Broker) pressure() memory.Level {
	if pol := b.policy.Load(); pol != nil {
		return pol.Pressure()
	}
	return memory.None
}

// loadInput samples the inputs of the load figure: connected clients against the
// connection cap in force, and memory against the runtime's limit.
func (b *Broker) loadInput() metrics.LoadInput {
	inUse, limit := metrics.RuntimeMemory()
	in := metrics.LoadInput{MaxConnections: connectionCap(b.running.Load()), MemoryBytes: inUse, MemoryLimitBytes: limit}
	if b.mqtt != nil {
		in.Connections = int64(b.mqtt.Clients())
	}
	return in
}

// connectionCap is the most connections c lets the broker hold: limits.max_connections
// within the open-file limit's room (broker.ConnectionCap), or the sum of the listeners'
// own caps when every listener has one and it is lower; 0 when nothing caps them. c has
// its defaults filled in.
func connectionCap(c *conf.Config) int64 {
	limit := broker.ConnectionCap(int64(*c.Limits.MaxConnections))
	var sum int64
	for _, l := range c.Listeners {
		if l.MaxConnections == 0 {
			return limit // this listener is bounded by the broker's cap alone
		}
		sum += int64(l.MaxConnections)
	}
	if limit == 0 || sum > 0 && sum < limit {
		return sum
	}
	return limit
}
