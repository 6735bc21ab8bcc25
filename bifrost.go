// Package bifrost embeds the bifrost MQTT broker in a Go program: build a Broker from a
// Config, Start it, Close it. The bifrost binary (cmd/bifrost) is a thin shell around the
// same API.
//
// This version serves the operator HTTP endpoint only (metrics, pprof, health, load); the
// MQTT listeners in the Config are not served yet.
package bifrost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// Config is the broker's configuration, the schema of the YAML file. It is re-exported
// here so that embedders need not import an internal package; its fields' types are
// reached through it.
type Config = conf.Config

// DefaultConfig returns the server profile's defaults, the configuration New uses when
// given nil; change fields on it before passing it to New.
func DefaultConfig() *Config { return conf.Default() }

// Errors returned by Start.
var (
	ErrStarted = errors.New("bifrost: broker already started")
	ErrClosed  = errors.New("bifrost: broker closed")
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
	http    *metrics.Server // nil before Start and when http.address is off

	routines routines
}

// An Option changes how New builds a Broker.
type Option func(*Broker)

// WithLogger makes the broker log to l instead of to stderr as cfg.Log describes.
func WithLogger(l *slog.Logger) Option {
	return func(b *Broker) { b.log = l }
}

// New returns a Broker for cfg, not yet started. A nil cfg means DefaultConfig(). New works
// on a copy, with unset fields filled by their defaults, and reports every invalid field at
// once; the caller may change or reuse cfg afterwards.
func New(cfg *Config, opts ...Option) (*Broker, error) {
	if cfg == nil {
		cfg = conf.Default()
	}
	cfg = cfg.Clone()
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bifrost: invalid config:\n%w", err)
	}
	b := &Broker{cfg: cfg}
	for _, opt := range opts {
		opt(b)
	}
	if b.log == nil {
		b.log, _ = logging.New(cfg.Log, os.Stderr)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.routines.init(b.ctx)
	b.metrics = metrics.New(b.loadInput)
	return b, nil
}

// Start binds the HTTP endpoint and starts serving. It returns once the endpoint accepts
// connections (HTTPAddr is then set) or with the error that prevented it; after an error,
// Close the Broker. ctx bounds the start only: the broker runs until Close.
func (b *Broker) Start(ctx context.Context) error {
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

	if n := len(b.cfg.Listeners); n > 0 {
		b.log.Warn("mqtt listeners are configured but not served: this version serves the http endpoint only", "listeners", n)
	}
	srv, err := metrics.Listen(b.cfg.HTTP, b.metrics, b.log)
	if err != nil {
		return fmt.Errorf("bifrost: %w", err)
	}
	if srv == nil {
		b.log.Info("http endpoint off")
		return nil
	}
	b.http = srv
	b.log.Info("http listening", "addr", srv.Addr().String(), "paths", "/metrics /healthz /load /debug/pprof/")
	b.routines.start("http", func(ctx context.Context) {
		if err := srv.Serve(ctx); err != nil {
			b.log.Error("http endpoint stopped", "err", err)
		}
	})
	return nil
}

// Close stops the broker gracefully: /healthz turns to 503, HTTP requests in flight get up
// to 5s to finish (long ones such as a CPU profile are cut short), and Close returns once
// every goroutine the broker started has ended.
// Close may be called more than once, and before Start; later calls return nil.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	srv := b.http
	b.mu.Unlock()

	// Cancelling first ends long requests (a 30s CPU profile) instead of waiting them out.
	b.cancel()
	var err error
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err = srv.Shutdown(ctx) // turns /healthz to 503 first
		cancel()
		b.log.Debug("http endpoint shut down", "err", err)
	}
	b.routines.wait()
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

// loadInput samples the inputs of the load figure. There are no MQTT connections yet and
// no cap on them, so memory against the runtime's limit alone decides.
func (b *Broker) loadInput() metrics.LoadInput {
	inUse, limit := metrics.RuntimeMemory()
	return metrics.LoadInput{MemoryBytes: inUse, MemoryLimitBytes: limit}
}
