// Package server is the composition of a bifrost instance, behind package bifrost's
// embedding API: it builds the parts from the configuration, starts and closes them in
// order, and wires them to one another.
//
// Start and close. New builds the MQTT broker (internal/broker) with its security, and
// the cluster node when the configuration has a cluster block; Start applies the memory
// policy, opens the store and restores it, starts the cluster part, the bridges, the MQTT
// listeners and last the HTTP endpoint, so that a client never reaches a server whose
// state is not back. Close runs it the other way: bridges, clients, the cluster node, the
// store, the endpoint, then it waits for every goroutine.
//
// Routines. Every goroutine of the server starts through one counter (routines.go):
// labelled in a goroutine profile, waited for by Close, and refused once Close has begun.
//
// Security. The configuration's auth blocks (auth.Set) decide who connects and what they
// touch, or the embedder's Authenticator who connects; on a cluster node an auth.Gate
// holds the CONNECTs until the cluster's auth files are in force. The server hands the
// node its auth state (the auth blocks, the gate) and the node seeds the cluster with
// this node's files, puts the cluster's in force and proposes them on reload.
//
// Cluster. With a cluster block the server is one node of several, linked only into
// programs that import bifrost/cluster (internal/clusterlink); the broker sees it through
// broker.Cluster, the HTTP endpoint through its clusterlink.Views.
//
// Reconfiguration. Reconfigure puts a new configuration's live fields in force (log
// level, memory limit, the broker's limits and listeners, auth blocks, the admin API's
// credentials) and reports those that wait for a restart; Reload reads the file again
// and re-reads the auth and TLS files.
//
// Endpoint. The HTTP endpoint (internal/httplink, linked by bifrost/endpoint) calls back
// for the admin API's credentials, the masked configuration and a reload (admin.go).
//
// Files: server.go the Server, its start and close order; routines.go the counted
// goroutines; security.go the auth blocks or the embedder's Authenticator, and
// ReloadFiles; cluster.go the cluster node's wiring; reconfigure.go Reconfigure and
// Reload; reconfigure_admin.go the admin API's credentials on a reconfiguration;
// admin.go what the admin API asks of the server.
package server

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

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/bridge"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
	"github.com/bifrost-mqtt/bifrost/internal/httplink"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/memory"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/session"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// Errors of Start, Close and Reconfigure, package bifrost's own.
var (
	ErrStarted    = errors.New("bifrost: broker already started")
	ErrClosed     = errors.New("bifrost: broker closed")
	ErrNotStarted = errors.New("bifrost: broker not started")
)

// shutdownGrace bounds how long Close waits for HTTP requests in flight.
const shutdownGrace = 5 * time.Second

// Options are what the embedder chose besides the configuration (package bifrost's
// Options).
type Options struct {
	Logger *slog.Logger   // nil: stderr, as the configuration's log block says
	Level  *slog.LevelVar // Logger's level, for Reconfigure; nil: an embedder's logger keeps its level
	File   string         // the configuration's file, for Reload; "": none

	// Authenticator decides every CONNECT in place of the password files (the ACL files
	// still apply), with Methods for enhanced authentication; nil: the files decide.
	Authenticator auth.Authenticator
	Methods       []auth.Method
}

// A Server is one bifrost instance. Its methods are safe for concurrent use.
type Server struct {
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
	bridges *bridge.Set      // nil before Start and without bridges
	cluster clusterlink.Node // nil without a cluster block (cluster.go)
	// clusterViews is cluster as the HTTP endpoint sees it; nil without a cluster block.
	clusterViews clusterlink.Views
	store        store.Store                   // nil before Start and when store.dir is off
	memory       *memory.Policy                // nil before Start
	policy       atomic.Pointer[memory.Policy] // memory, for the connection paths without b.mu
	budget       *memory.Budget                // the publish path's intake, attached to memory

	routines routines

	auth        *auth.Set          // the configuration's auth blocks, for ReloadFiles
	gate        *auth.Gate         // a cluster node's CONNECTs wait for the cluster's auth files; nil: none
	hook        auth.Authenticator // Options.Authenticator; nil: the auth blocks decide
	hookMethods []auth.Method      // Options.Methods

	// Live reconfiguration (reconfigure.go).
	reconf  sync.Mutex                       // serializes Reconfigure
	running atomic.Pointer[conf.Config]      // the configuration in force: cfg with the live changes since
	file    string                           // Options.File: what Reload reads
	level   *slog.LevelVar                   // the logger's level; nil: an embedder's logger, left alone
	admin   atomic.Pointer[auth.AdminAccess] // the admin API's users and tokens; nil: the API is off
}

// New returns a Server for cfg, not yet started: package bifrost's New.
func New(cfg *conf.Config, o Options) (*Server, error) {
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
	b := &Server{cfg: cfg, budget: new(memory.Budget), log: o.Logger, level: o.Level, file: o.File,
		hook: o.Authenticator, hookMethods: o.Methods}
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
	if err := b.newCluster(cfg); err != nil {
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
// among them); after an error, Close the Server. ctx bounds the start only: the broker
// runs until Close. With the edge profile, Start then hands the executable's start-up
// pages back to the kernel (memory.ReleaseCode): in the whole process, on Linux.
func (b *Server) Start(ctx context.Context) error {
	if err := b.start(ctx); err != nil {
		return err
	}
	if b.cfg.Memory.Profile == conf.ProfileEdge {
		n, err := memory.ReleaseCode()
		b.log.Debug("memory: executable's pages released", "advised_bytes", n, "err", err)
	}
	return nil
}

func (b *Server) start(ctx context.Context) error {
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
		Cluster: b.clusterViews, CheckAdmin: b.checkAdmin, Reload: func() (any, error) { return b.Reload() },
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
func (b *Server) Close() error {
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
func (b *Server) HTTPAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.http == nil {
		return nil
	}
	return b.http.Addr()
}

// Addrs returns the address of every MQTT listener, in config order, with the ports chosen
// when the config says 0; nil before Start.
func (b *Server) Addrs() []net.Addr {
	var out []net.Addr
	for _, l := range b.mqtt.Listeners() {
		out = append(out, l.Addr())
	}
	return out
}

// Publish publishes a message from the embedding program, with the broker as publisher.
// The payload is copied; retain and QoS mean what they mean for a client's PUBLISH.
func (b *Server) Publish(topic string, payload []byte, qos byte, retain bool) error {
	return b.mqtt.Publish(topic, payload, qos, retain)
}

// Subscribe calls fn for every message published to a topic that filter matches, with
// this delivery's QoS and retain flag: package bifrost's Subscribe, a broker.Tap of one
// filter (fn's contract is broker.TapFunc's; nothing it sees is stored). The returned
// function ends the subscription; calling it again does nothing.
func (b *Server) Subscribe(filter string, fn func(m *session.Message, qos uint8, retain bool)) (unsubscribe func(), err error) {
	tap, err := b.mqtt.NewTap(func(m *session.Message, qos uint8, retain bool) bool {
		fn(m, qos, retain)
		return false
	})
	if err != nil {
		return nil, err
	}
	if err := tap.Subscribe(filter, 2); err != nil {
		tap.Close(nil)
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { tap.Close([]string{filter}) }) }, nil
}

// pressure is the memory policy's pressure level; none before Start.
func (b *Server) pressure() memory.Level {
	if pol := b.policy.Load(); pol != nil {
		return pol.Pressure()
	}
	return memory.None
}

// loadInput samples the inputs of the load figure: connected clients against the
// connection cap in force, and memory against the runtime's limit.
func (b *Server) loadInput() metrics.LoadInput {
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
