// Package endpoint is the operator's HTTP endpoint: /metrics in Prometheus's format (the
// broker's registry with the Go runtime's and the process's series), /healthz, /load,
// pprof, the admin API and dashboard (internal/admin) and a cluster node's /cluster. It
// is linked only into programs that import github.com/bifrost-mqtt/bifrost/endpoint,
// which registers it with internal/httplink: the Prometheus client, net/http and the
// admin API cost an embedder that does not serve them nothing (docs/edge.md,
// "Embedding").
package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/admin"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// A Server is the operator's HTTP endpoint:
//
//	/metrics        Prometheus exposition of the metrics.Registry and the runtime's series
//	/healthz        200 "ok" while serving, 503 "shutting down" once SetReady(false)
//	/load           the load figure as JSON (LoadReport; on a cluster node, every node's)
//	/debug/pprof/   net/http/pprof, on this server's own mux, unless http.pprof is off
//
// /healthz answers every request; the others answer whom http.metrics and http.pprof let
// in (access.go). The routes live on a ServeMux of our own, so this endpoint serves exactly
// these paths, whatever else the process mounts on http.DefaultServeMux. Note that
// importing net/http/pprof also registers its handlers on http.DefaultServeMux (its init
// does so unconditionally): an embedder that serves DefaultServeMux to the world exposes
// them.
type Server struct {
	cfg      conf.HTTP
	reg      *metrics.Registry
	prom     *prometheus.Registry // reg's series and the runtime collectors (prom.go)
	log      *slog.Logger
	access   access
	ln       net.Listener
	srv      *http.Server
	mux      *http.ServeMux
	paths    string      // what it serves, for the log
	notReady atomic.Bool // set by SetReady(false): /healthz answers 503
}

// Listen binds the endpoint to cfg.Address (port 0 picks a free port; see Addr). acc
// holds the admin credentials that http.metrics: admin and pprof off loopback ask for;
// nil when there are none. When cfg.Address is "off", Listen returns a nil Server and no
// error: the endpoint is disabled.
func Listen(cfg conf.HTTP, reg *metrics.Registry, log *slog.Logger, acc *auth.AdminAccess) (*Server, error) {
	if cfg.Address == conf.HTTPOff {
		return nil, nil
	}
	s, err := newServer(cfg, reg, log, acc)
	if err != nil {
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", cfg.Address); err != nil {
		return nil, fmt.Errorf("endpoint: http listen: %w", err)
	}
	return s, nil
}

// newServer is the endpoint with its routes, not yet listening.
func newServer(cfg conf.HTTP, reg *metrics.Registry, log *slog.Logger, acc *auth.AdminAccess) (*Server, error) {
	prom, err := newPrometheus(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, reg: reg, prom: prom, log: log, access: access{acc: acc, hosts: admin.NewHosts(cfg.AllowedHosts)}}
	s.srv = &http.Server{
		Handler: s.routes(),
		// A scrape or health check sends its headers at once; a client that does not is
		// holding a connection open. No WriteTimeout: a CPU profile streams for 30s.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// net/http logs accept errors (it backs off on temporary ones and retries) and
		// handler panics here; route them to the broker's log.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	s.mux = mux
	s.paths = "/metrics /healthz /load"
	views := s.views()
	mux.Handle("GET /metrics", views(promhttp.HandlerFor(s.prom, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Registry: s.prom, // counts promhttp's own errors
	})))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /load", views(http.HandlerFunc(s.loadReport)))
	if s.cfg.Metrics != conf.HTTPAdmin && !conf.IsLoopback(s.cfg.Address) {
		s.log.Info("metrics open off loopback", "paths", "/metrics /load, and a cluster node's /cluster", "addr", s.cfg.Address,
			"why", "http.metrics: open (admin: the admin credentials); a Host other than an IP address, localhost or a name of http.allowed_hosts gets 421")
	}
	mode := s.pprofMode()
	if mode == conf.HTTPOff {
		return mux
	}
	s.paths += " /debug/pprof/"
	if mode == conf.HTTPOpen && !conf.IsLoopback(s.cfg.Address) {
		s.log.Warn("pprof open off loopback", "addr", s.cfg.Address,
			"why", "http.pprof: open; its command line, heap profiles and traces are anyone's who reaches the address")
	}
	guard := func(h http.HandlerFunc) http.Handler { return s.access.wrap(mode, h) }
	// Index also serves the named profiles: /debug/pprof/heap, goroutine, allocs ...
	mux.Handle("/debug/pprof/", guard(pprof.Index))
	mux.Handle("/debug/pprof/cmdline", guard(pprof.Cmdline))
	mux.Handle("/debug/pprof/profile", guard(pprof.Profile))
	mux.Handle("/debug/pprof/symbol", guard(pprof.Symbol))
	mux.Handle("/debug/pprof/trace", guard(pprof.Trace))
	return mux
}

// pprofMode resolves http.pprof to open, admin or off: auto is open on a loopback
// address and asks for the admin credentials elsewhere, or is off when there are none
// to ask for (logged).
func (s *Server) pprofMode() string {
	switch m := s.cfg.PProf; {
	case m == conf.HTTPOpen || m == conf.HTTPAdmin:
		return m
	case m != conf.HTTPAuto:
		return conf.HTTPOff
	case conf.IsLoopback(s.cfg.Address):
		return conf.HTTPOpen
	case s.access.acc == nil || s.access.acc.Open():
		s.log.Warn("pprof off", "why", "http.address is not on loopback and no admin credentials are in force (http.pprof: auto)")
		return conf.HTTPOff
	}
	return conf.HTTPAdmin
}

// views returns the wrapper of the read-only views, /metrics, /load and a cluster
// node's /cluster: open, or behind the admin credentials (http.metrics).
func (s *Server) views() func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler { return s.access.wrap(s.cfg.Metrics, h) }
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.notReady.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("shutting down\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) loadReport(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(s.reg.Report()); err != nil {
		s.log.Debug("http /load: write failed", "err", err)
	}
}

// Handle serves pattern (as http.ServeMux takes it) with h besides the endpoint's own
// paths: the admin API's, a cluster node's /cluster.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Paths lists the paths the endpoint serves, for the log: its own and those given to
// AddPaths.
func (s *Server) Paths() string { return s.paths }

// AddPaths adds to what Paths lists.
func (s *Server) AddPaths(p string) { s.paths += " " + p }

// Addr returns the address the endpoint listens on, with the port chosen when it was 0.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// SetReady sets what /healthz answers: ready (200, the initial state) or shutting down
// (503), so that a load balancer stops sending new clients before the broker goes away.
func (s *Server) SetReady(ready bool) { s.notReady.Store(!ready) }

// Serve accepts requests until Shutdown and returns nil then; any other return is the
// accept loop failing for good. ctx is the parent of every request's context: cancelling
// it ends long requests such as /debug/pprof/profile. Serve is called once.
func (s *Server) Serve(ctx context.Context) error {
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("endpoint: http serve on %s: %w", s.ln.Addr(), err)
}

// Shutdown marks the endpoint not ready, stops accepting and waits for requests in
// flight until ctx is done, then closes whatever is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetReady(false)
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("endpoint: http shutdown: %w", err), s.srv.Close())
	}
	return err
}
