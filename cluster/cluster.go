// Package cluster lets a bifrost broker run as one node of a cluster (docs/cluster.md).
// A program that imports it can start a config with a cluster block; one that does not
// links none of the cluster's code (memberlist, Raft, gRPC), and its config must have
// none. cmd/bifrost imports it; an embedder that wants a cluster adds
//
//	import _ "github.com/bifrost-mqtt/bifrost/cluster"
package cluster

import (
	"time"

	engine "github.com/bifrost-mqtt/bifrost/internal/cluster"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

func init() { clusterlink.Register(newNode) }

// node is the cluster engine as the server drives it (clusterlink.Node); the HTTP
// endpoint sees the engine itself (clusterlink.Views).
type node struct{ *engine.Cluster }

var (
	_ clusterlink.Node  = node{}
	_ clusterlink.Views = (*engine.Cluster)(nil)
)

func newNode(env clusterlink.Env) (clusterlink.Node, clusterlink.Views, error) {
	var sys time.Duration // $SYS, the cluster's totals included; 0: off
	if iv := env.Config.SysInterval; iv != nil {
		sys = time.Duration(*iv)
	}
	c, err := engine.New(engine.Options{Config: env.Config.Cluster, Logger: env.Logger,
		Metrics: env.Metrics, Go: env.Go, Load: env.Load, SysInterval: sys})
	if err != nil {
		return nil, nil, err
	}
	env.Metrics.SetNodes(c.Nodes) // /load shows the cluster
	return node{c}, c, nil
}

// Advertise sets the MQTT address other nodes redirect clients to.
func (n node) Advertise(mqttAddr string) { n.SetMQTTAddr(mqttAddr) }
