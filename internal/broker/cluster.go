package broker

import "github.com/bifrost-mqtt/bifrost/internal/packet"

// Cluster is what the broker asks of the cluster this node is part of. Package cluster
// implements it and the server (internal/server) connects the two, so that this package
// imports nothing of the cluster's: a single node (Options.Cluster nil) costs one nil
// test on each path that asks, and links no cluster code into the broker's.
//
// Each part of the cluster declares what it needs from the broker's side in an
// interface of its own file (cluster_routes.go, cluster_owner.go, ...) and embeds it
// here. Methods are called from the pollers and must not block unless they say so.
type Cluster interface {
	ClusterOwner    // cluster_owner.go: one client id, one live connection
	ClusterRoutes   // cluster_routes.go: routes and forwarding
	ClusterRetained // cluster_retained.go: the retained set is the cluster's
	Redirector
}

// A Redirector sends new clients to a less loaded node.
type Redirector interface {
	// Redirect returns the MQTT address (host:port) of the node a new MQTT 5 client
	// should connect to instead of this one, or "" to serve it here. It is asked at
	// every MQTT 5 CONNECT, so it answers from what it has at hand.
	Redirect() string
}

// redirect answers a CONNECT with 0x9C (Use another server) and a Server Reference to
// ref, then closes the connection [MQTT-3.2.2-7]. MQTT 5 only: 3.1.1 has no way to
// name another server.
func (b *Broker) redirect(cl *client, ref string) {
	b.stats.refusedCode(packet.UseAnotherServer)
	ack := packet.Connack{Code: packet.UseAnotherServer}
	ack.Props.ServerReference = []byte(ref)
	_, _ = cl.conn.Write(ack.AppendTo(make([]byte, 0, 16+len(ref)), packet.V5))
	cl.closing = true
	cl.conn.Shutdown()
}
