package bifrost

import (
	"context"
	"fmt"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster"
	"github.com/bifrost-mqtt/bifrost/internal/conf"
)

// The cluster's place in the server: with a cluster block the broker is one node of
// several (internal/cluster), without one it starts no cluster goroutine, port or state.
// The MQTT broker sees the cluster only through broker.Cluster; this file connects them.
//
// Order: the store opens first (the cluster's default directory is inside store.dir,
// which the store wants to find empty or holding its own database), then the cluster
// starts, then the MQTT listeners, so a client never reaches a node whose cluster part
// is not running; the cluster's forming goes on in the background. Close runs it the
// other way: clients are disconnected, then the node leaves the cluster gracefully (the
// leader removes it from Raft's configuration), then the store closes.

// newCluster returns the cluster part for cfg, not started; nil without a cluster block.
// It refuses gossip or rpc reachable from the network without a secret.
func (b *Broker) newCluster(cfg *conf.Config) (*cluster.Cluster, error) {
	if cfg.Cluster == nil {
		return nil, nil
	}
	if err := cfg.CheckClusterExposure(); err != nil {
		return nil, fmt.Errorf("refusing to start:\n%w", err)
	}
	c, err := cluster.New(cluster.Options{Config: cfg.Cluster, Logger: b.log, Metrics: b.metrics, Go: b.routines.start,
		Load: func() float64 { return b.metrics.Load().Load }})
	if err != nil {
		return nil, err
	}
	b.metrics.SetNodes(c.Nodes) // /load shows the cluster
	return c, nil
}

// startCluster starts the cluster part, if any: membership, the rpc port, Raft.
func (b *Broker) startCluster(ctx context.Context) error {
	if b.cluster == nil {
		return nil
	}
	b.cluster.SetRetainedStore(b.mqtt)                                      // the replicated retained set drives the broker's
	b.cluster.SetAuthHost(&clusterAuth{b: b, warned: map[[2]string]bool{}}) // and the auth files, its auth
	var sys time.Duration
	if iv := b.cfg.SysInterval; iv != nil {
		sys = time.Duration(*iv)
	}
	b.cluster.SetSys(sys, func() cluster.Figures {
		f := b.mqtt.Figures()
		return cluster.Figures{ClientsConnected: f.ClientsConnected, ClientsTotal: f.ClientsTotal,
			Subscriptions: f.Subscriptions, Received: f.Received, Sent: f.Sent}
	}, func(topic, value string) { _ = b.mqtt.Publish(topic, []byte(value), 0, true) })
	if err := b.cluster.Start(ctx); err != nil {
		return err
	}
	b.routines.start("cluster auth seed", b.seedAuth)
	return nil
}

// advertiseMQTT tells the other nodes the MQTT address clients redirected here use: the
// first tcp listener's, unless cluster.mqtt_advertise says otherwise.
func (b *Broker) advertiseMQTT() {
	if b.cluster == nil {
		return
	}
	for _, l := range b.mqtt.Listeners() {
		if l.Type() == conf.ListenerTCP {
			b.cluster.SetMQTTAddr(l.Addr().String())
			return
		}
	}
}
