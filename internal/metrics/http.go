package metrics

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

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A Server is the operator's HTTP endpoint:
//
//	/metrics        Prometheus exposition of the Registry
//	/healthz        200 "ok" while serving, 503 "shutting down" once SetReady(false)
//	/load           the load figure as JSON (LoadReport; on a cluster node, every node's)
//	/debug/pprof/   net/http/pprof, on this server's own mux
//
// The routes live on a ServeMux of our own, so this endpoint serves exactly these paths,
// whatever else the process mounts on http.DefaultServeMux. Note that importing
// net/http/pprof also registers its handlers on http.DefaultServeMux (its init does so
// unconditionally): an embedder that serves DefaultServeMux to the world exposes them.
type Server struct {
	reg      *Registry
	log      *slog.Logger
	ln       net.Listener
	srv      *http.Server
	mux      *http.ServeMux
	notReady atomic.Bool // set by SetReady(false): /healthz answers 503
}

// Listen binds the endpoint to cfg.Address (port 0 picks a free port; see Addr). When
// cfg.Address is "off", Listen returns a nil Server and no error: the endpoint is disabled.
func Listen(cfg conf.HTTP, reg *Registry, log *slog.Logger) (*Server, error) {
	if cfg.Address == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("metrics: http listen: %w", err)
	}
	s := &Server{reg: reg, log: log, ln: ln}
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Registry: s.reg.reg, // counts promhttp's own errors
	}))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /load", s.loadReport)
	// Index also serves the named profiles: /debug/pprof/heap, goroutine, allocs ...
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
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
	if err := json.NewEncoder(w).Encode(s.reg.report()); err != nil {
		s.log.Debug("http /load: write failed", "err", err)
	}
}

// Handle serves pattern (as http.ServeMux takes it) with h besides the endpoint's own
// paths: another part of the broker's, such as the cluster's /cluster.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

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
	return fmt.Errorf("metrics: http serve on %s: %w", s.ln.Addr(), err)
}

// Shutdown marks the endpoint not ready, stops accepting and waits for requests in
// flight until ctx is done, then closes whatever is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetReady(false)
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("metrics: http shutdown: %w", err), s.srv.Close())
	}
	return err
}
