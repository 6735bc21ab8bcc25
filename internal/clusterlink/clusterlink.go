// Package clusterlink connects the server (internal/server) to a cluster without linking
// one: the cluster's code (memberlist, Raft, gRPC and what they bring) is linked only
// into programs that import github.com/bifrost-mqtt/bifrost/cluster, which registers
// itself here. cmd/bifrost imports it; an embedder that runs a single node does not pay
// for it (docs/lab/edge.md: 12 MB of binary, about 2.5 MiB of resident memory under the
// edge load).
package clusterlink

import (
	"context"
	"errors"
	"log/slog"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// Env is what the server gives a cluster node it makes.
type Env struct {
	Config  *conf.Config // with its defaults filled in and validated; Config.Cluster is set
	Logger  *slog.Logger
	Metrics *metrics.Registry
	// Go runs fn on a goroutine of the server's, which Close waits for; false once the
	// server is closing.
	Go func(name string, fn func(ctx context.Context)) bool
	// Load is this node's load figure (metrics.Load).
	Load func() float64
}

// A Node is one cluster node as the server drives it: made before the broker (which
// asks it as broker.Cluster), attached to the broker, started before the MQTT
// listeners, told their address, closed after the broker. It also serves GET /cluster
// as an http.Handler, which the HTTP endpoint asserts (internal/httplink): naming
// net/http here would link it into every embedder.
type Node interface {
	broker.Cluster
	// Attach connects the node to the broker on its node, which the cluster calls as its
	// broker.ClusterHost, before Start. The cluster's $SYS totals follow sys_interval
	// (Env.Config).
	Attach(host broker.ClusterHost)
	Start(ctx context.Context) error
	// Advertise sets the MQTT address other nodes send redirected clients to.
	Advertise(mqttAddr string)
	Close() error

	// The auth files every node enforces (internal/cluster/auth_files.go).

	// SetAuthHost makes h the auth state the replicated files drive; before Start.
	SetAuthHost(h AuthHost)
	// Wait returns once the node is part of a formed cluster, or with ctx's error.
	Wait(ctx context.Context) error
	// SeedAuth offers the cluster this node's files where it has none yet, and returns
	// once this node enforces what the log holds; ErrOldMembers during a rolling upgrade.
	SeedAuth(ctx context.Context, files []auth.File) error
	// ProposeAuth proposes the files that differ from the cluster's and returns how many
	// once this node enforces them.
	ProposeAuth(ctx context.Context, files []auth.File) (int, error)

	// The sessions of every node, for the admin API's listings (internal/admin's Cluster).

	// SessionNodes returns the names of the cluster's nodes, sorted: the order in which
	// a cluster-wide listing walks them.
	SessionNodes() []string
	// NodeSessions returns a page of node's sessions, as broker.Broker.Sessions does
	// on that node; an error when the node is down or did not answer.
	NodeSessions(ctx context.Context, node string, cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32, error)
}

// An AuthHost is the node's auth state, which the replicated files drive (see
// internal/cluster's AuthHost).
type AuthHost interface {
	UseAuthFiles(files []auth.File, index uint64)
	AuthDigest() string
}

// ErrOldMembers: a member runs a build that cannot apply auth files (a rolling upgrade);
// each node enforces its own files meanwhile.
var ErrOldMembers = errors.New("cluster: a member's build cannot apply auth files")

// ErrNotLinked is New's error when no cluster package is linked into the program.
var ErrNotLinked = errors.New(`the config has a cluster block, and this program links no cluster: ` +
	`import _ "github.com/bifrost-mqtt/bifrost/cluster" (cmd/bifrost does, unless built with -tags bifrost_nocluster)`)

var factory func(Env) (Node, error)

// Register makes New use f. The cluster package calls it from its init.
func Register(f func(Env) (Node, error)) { factory = f }

// Linked reports whether a cluster package is linked into the program.
func Linked() bool { return factory != nil }

// New makes the node for env, not started.
func New(env Env) (Node, error) {
	if factory == nil {
		return nil, ErrNotLinked
	}
	return factory(env)
}
