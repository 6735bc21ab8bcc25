// Package httplink connects the server (internal/server) to the operator's HTTP endpoint
// without linking it: the endpoint's code (internal/endpoint: the Prometheus client and
// its runtime and process collectors, net/http, pprof, the admin API and dashboard) is
// linked only into programs that import github.com/bifrost-mqtt/bifrost/endpoint, which
// registers itself here. cmd/bifrost imports it; an embedder that serves no HTTP does not
// pay for it (docs/edge.md, "Embedding").
package httplink

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// Env is what the server gives the endpoint it opens.
type Env struct {
	Config  *conf.Config // with its defaults filled in and validated; HTTP.Address is not off
	Logger  *slog.Logger
	Metrics *metrics.Registry
	Broker  *broker.Broker    // started: its listeners have their addresses
	Cluster clusterlink.Views // nil on a single node

	// What the admin API asks of the server.

	// CheckAdmin verifies an admin's password against the password file.
	CheckAdmin func(user string, password []byte) bool
	// Reload re-reads what SIGHUP re-reads and reports what changed.
	Reload func() (report any, err error)
	// MaskedConfig is the configuration in force, secrets masked.
	MaskedConfig func() any
	// AdminOn is told the admin API's users and tokens when the API is mounted, so that
	// a reconfiguration puts new ones in force (it is not called when the API is off).
	AdminOn func(*auth.AdminAccess)
}

// A Server is the open endpoint.
type Server interface {
	// Addr is the address it listens on, with the port chosen when the config says 0.
	Addr() net.Addr
	// Paths lists the paths it serves, for the log.
	Paths() string
	// Serve accepts requests until Shutdown and returns nil then; ctx is the parent of
	// every request's context. Serve is called once.
	Serve(ctx context.Context) error
	// Shutdown turns /healthz to 503, stops accepting and waits for requests in flight
	// until ctx is done.
	Shutdown(ctx context.Context) error
}

// ErrNotLinked is New's error when the config has an HTTP endpoint and no endpoint
// package is linked into the program.
var ErrNotLinked = errors.New(`the config's http.address is not "off", and this program links no HTTP endpoint: ` +
	`import _ "github.com/bifrost-mqtt/bifrost/endpoint" (cmd/bifrost does), or set http.address to "off"`)

var factory func(Env) (Server, error)

// Register makes Listen use f. The endpoint package calls it from its init.
func Register(f func(Env) (Server, error)) { factory = f }

// Linked reports whether an endpoint package is linked into the program.
func Linked() bool { return factory != nil }

// Listen opens the endpoint for env, not yet serving.
func Listen(env Env) (Server, error) {
	if factory == nil {
		return nil, ErrNotLinked
	}
	return factory(env)
}
