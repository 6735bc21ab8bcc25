// Package cluster lets a bifrost broker run as one node of a cluster (docs/cluster.md).
// A program that imports it can start a config with a cluster block; one that does not
// links none of the cluster's code (memberlist, Raft, gRPC), and its config must have
// none. cmd/bifrost imports it; an embedder that wants a cluster adds
//
//	import _ "github.com/bifrost-mqtt/bifrost/cluster"
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	engine "github.com/bifrost-mqtt/bifrost/internal/cluster"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

func init() { clusterlink.Register(newNode) }

// node is the cluster engine as the server drives it (clusterlink.Node), and the
// handler of GET /cluster the HTTP endpoint mounts.
type node struct{ *engine.Cluster }

var _ http.Handler = node{}

func newNode(env clusterlink.Env) (clusterlink.Node, error) {
	var sys time.Duration // $SYS, the cluster's totals included; 0: off
	if iv := env.Config.SysInterval; iv != nil {
		sys = time.Duration(*iv)
	}
	c, err := engine.New(engine.Options{Config: env.Config.Cluster, Logger: env.Logger,
		Metrics: env.Metrics, Go: env.Go, Load: env.Load, SysInterval: sys})
	if err != nil {
		return nil, err
	}
	env.Metrics.SetNodes(c.Nodes) // /load shows the cluster
	return node{c}, nil
}

// Advertise sets the MQTT address other nodes redirect clients to.
func (n node) Advertise(mqttAddr string) { n.SetMQTTAddr(mqttAddr) }

// SetAuthHost makes h the auth state the replicated files drive.
func (n node) SetAuthHost(h clusterlink.AuthHost) { n.Cluster.SetAuthHost(h) }

// SeedAuth is the engine's, with its rolling-upgrade refusal as clusterlink's.
func (n node) SeedAuth(ctx context.Context, files []auth.File) error {
	err := n.Cluster.SeedAuth(ctx, files)
	if errors.Is(err, engine.ErrOldMembers) {
		return fmt.Errorf("%w: %w", clusterlink.ErrOldMembers, err)
	}
	return err
}
