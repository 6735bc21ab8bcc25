package server

import (
	"context"
	"fmt"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

// The cluster's place in the server: with a cluster block the broker is one node of
// several, without one it starts no cluster goroutine, port or state. The cluster's code
// is linked only into programs that import github.com/bifrost-mqtt/bifrost/cluster
// (internal/clusterlink says why). The broker and the cluster meet only through the two
// ports of internal/broker/cluster.go, which the server connects: the broker holds the
// node as its broker.Cluster (New, server.go), and the node is attached to the broker,
// its broker.ClusterHost, before it starts (startCluster).
//
// Order: the store opens first (the cluster's default directory is inside store.dir,
// which the store wants to find empty or holding its own database), then the cluster
// starts, then the MQTT listeners, so a client never reaches a node whose cluster part
// is not running; the cluster's forming goes on in the background. Close runs it the
// other way: clients are disconnected, then the node leaves the cluster gracefully (the
// leader removes it from Raft's configuration), then the store closes.

// newCluster makes the cluster node for cfg, not started, and its views for the HTTP
// endpoint; none without a cluster block. It refuses gossip or rpc reachable from the
// network without a secret, and a cluster block in a program that links no cluster.
func (b *Server) newCluster(cfg *conf.Config) error {
	if cfg.Cluster == nil {
		return nil
	}
	if err := cfg.CheckClusterExposure(); err != nil {
		return fmt.Errorf("refusing to start:\n%w", err)
	}
	node, views, err := clusterlink.New(clusterlink.Env{Config: cfg, Logger: b.log, Metrics: b.metrics, Go: b.routines.start,
		Load: func() float64 { return b.metrics.Load().Load }})
	if err != nil {
		return err
	}
	b.cluster, b.clusterViews = node, views
	return nil
}

// startCluster starts the cluster node, if any: membership, the rpc port, Raft. The
// node is handed this server's auth state: the auth files it enforces are the cluster's,
// which it seeds with this node's own once the cluster has formed, and until then the
// gate holds the CONNECTs (internal/cluster, auth_local.go).
func (b *Server) startCluster(ctx context.Context) error {
	if b.cluster == nil {
		return nil
	}
	b.cluster.Attach(b.mqtt)
	b.cluster.SetAuth(clusterlink.AuthState{Set: b.auth, Gate: b.gate, Changed: b.mqtt.ACLChanged})
	return b.cluster.Start(ctx)
}

// advertiseMQTT tells the other nodes the MQTT address clients redirected here use: the
// first tcp listener's, unless cluster.mqtt_advertise says otherwise.
func (b *Server) advertiseMQTT() {
	if b.cluster == nil {
		return
	}
	for _, l := range b.mqtt.Listeners() {
		if l.Type() == conf.ListenerTCP {
			b.cluster.Advertise(l.Addr().String())
			return
		}
	}
}
