package broker

// Cluster is what the broker asks of the cluster this node is part of. Package cluster
// implements it and the server (package bifrost) connects the two, so that this package
// imports nothing of the cluster's: a single node (Options.Cluster nil) costs one nil
// test on each path that asks, and links no cluster code into the broker's.
//
// Each part of the cluster declares what it needs from the broker's side in an
// interface of its own file (cluster_routes.go, cluster_owner.go, ...) and embeds it
// here. Methods are called from the pollers and must not block unless they say so.
type Cluster interface {
	ClusterRoutes
}
