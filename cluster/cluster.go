// Package cluster lets a bifrost broker run as one node of a cluster (docs/cluster.md).
// A program that imports it can start a config with a cluster block; one that does not
// links none of the cluster's code (memberlist, Raft, gRPC), and its config must have
// none. cmd/bifrost imports it; an embedder that wants a cluster adds
//
//	import _ "github.com/bifrost-mqtt/bifrost/cluster"
package cluster

import (
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
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
	c, err := engine.New(engine.Options{Config: env.Config.Cluster, Logger: env.Logger,
		Metrics: env.Metrics, Go: env.Go, Load: env.Load})
	if err != nil {
		return nil, nil, err
	}
	env.Metrics.SetNodes(c.Nodes) // /load shows the cluster
	return node{c}, c, nil
}

// Attach connects the broker: forwarded messages go to its subscribers, fences,
// hand-overs and the lease reach it, the replicated retained set drives its own, its
// sessions are listed for the other nodes' admin API, and $SYS gets the cluster's totals.
func (n node) Attach(mqtt *broker.Broker, sys time.Duration) {
	n.SetLocal(mqtt)
	n.SetHost(mqtt)
	n.SetRetainedStore(mqtt)
	n.SetSessions(mqtt.Sessions)
	n.SetSys(sys, func() engine.Figures {
		f := mqtt.Figures()
		return engine.Figures{ClientsConnected: f.ClientsConnected, ClientsTotal: f.ClientsTotal,
			Subscriptions: f.Subscriptions, Received: f.Received, Sent: f.Sent}
	}, func(topic, value string) { _ = mqtt.Publish(topic, []byte(value), 0, true) })
}

// Advertise sets the MQTT address other nodes redirect clients to.
func (n node) Advertise(mqttAddr string) { n.SetMQTTAddr(mqttAddr) }
