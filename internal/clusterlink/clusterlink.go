// Package clusterlink connects the server (internal/server) to a cluster without linking
// one: the cluster's code (memberlist, Raft, gRPC and what they bring) is linked only
// into programs that import github.com/bifrost-mqtt/bifrost/cluster, which registers
// itself here. cmd/bifrost imports it; an embedder that runs a single node does not pay
// for it (docs/lab/edge.md: 12 MB of binary, about 2.5 MiB of resident memory under the
// edge load).
//
// Each side sees the node through a small interface of its own: the server a Node
// (lifecycle, Auth, and broker.Cluster for the broker), the HTTP endpoint its Views.
// The cluster engine (internal/cluster) implements them with the types declared here.
//
// Files: clusterlink.go (Env, Node, Auth, Views, Register and New), status.go (Status,
// the GET /cluster view).
package clusterlink

import (
	"context"
	"errors"
	"log/slog"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
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
// asks it as broker.Cluster), attached to the broker, handed the server's auth state,
// started before the MQTT listeners, told their address, closed after the broker. What
// the HTTP endpoint shows of the node are its Views, which New returns beside it.
type Node interface {
	broker.Cluster
	Auth
	// Attach connects the node to the broker on its node, which the cluster calls as its
	// broker.ClusterHost, before Start. The cluster's $SYS totals follow sys_interval
	// (Env.Config).
	Attach(host broker.ClusterHost)
	// Start starts membership, the rpc port and Raft, and returns; the cluster forms in
	// the background.
	Start(ctx context.Context) error
	// Advertise sets the MQTT address other nodes send redirected clients to.
	Advertise(mqttAddr string)
	Close() error
}

// Auth is the node's side of the password and ACL files every node of a cluster
// enforces: those the Raft log holds, not each node's own (internal/cluster,
// auth_files.go and auth_local.go).
type Auth interface {
	// SetAuth hands the node the server's auth state, before Start. Every change of the
	// log's files is put in force through it on every node, and once the cluster has
	// formed the node seeds it with this node's files where it holds none, then opens
	// the gate.
	SetAuth(a AuthState)
	// ReloadAuth reads this node's files again and proposes those that differ from the
	// cluster's; it returns once this node enforces them, or with the error, and then
	// nothing changed on any node.
	ReloadAuth(ctx context.Context) error
}

// AuthState is the server's auth state as it hands it to its cluster node.
type AuthState struct {
	// Set is the configuration's auth blocks: this node's own files (Read), and the
	// files it enforces (Use, Sums).
	Set *auth.Set
	// Gate holds this node's CONNECTs until it enforces the cluster's files; nil: none
	// (an embedder's Authenticator decides).
	Gate *auth.Gate
	// Changed runs after files put in force changed, on Raft's FSM goroutine: the broker
	// checks subscriptions under the new ACL (broker.Broker.ACLChanged).
	Changed func()
}

// Views are what the HTTP endpoint shows of a cluster node: GET /cluster, the admin
// API's listings of every node's sessions (internal/admin's Cluster) and which node a
// client id is on.
type Views interface {
	// Status is this node's view of the cluster, which GET /cluster serves as JSON.
	Status() Status
	// NodeName is this node's name.
	NodeName() string
	// Owner returns the node a client id is on as the cluster's log says ("" for none),
	// and the epoch of its claim.
	Owner(cid string) (node string, epoch uint64)
	// SessionNodes returns the names of the cluster's nodes, sorted: the order in which
	// a cluster-wide listing walks them.
	SessionNodes() []string
	// NodeSessions returns a page of node's sessions, as broker.Broker.Sessions does
	// on that node; an error when the node is down or did not answer.
	NodeSessions(ctx context.Context, node string, cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32, error)
}

// ErrNotLinked is New's error when no cluster package is linked into the program.
var ErrNotLinked = errors.New(`the config has a cluster block, and this program links no cluster: ` +
	`import _ "github.com/bifrost-mqtt/bifrost/cluster" (cmd/bifrost does, unless built with -tags bifrost_nocluster)`)

var factory func(Env) (Node, Views, error)

// Register makes New use f. The cluster package calls it from its init.
func Register(f func(Env) (Node, Views, error)) { factory = f }

// Linked reports whether a cluster package is linked into the program.
func Linked() bool { return factory != nil }

// New makes the node for env, not started, and its Views: the same node as the HTTP
// endpoint sees it.
func New(env Env) (Node, Views, error) {
	if factory == nil {
		return nil, nil, ErrNotLinked
	}
	return factory(env)
}
