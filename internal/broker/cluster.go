package broker

// Cluster is what the broker needs from the cluster it is a node of (internal/cluster
// implements it; the server connects the two). Options.Cluster nil is a single node: every
// hot path tests it once and pays nothing more. Package broker never imports package
// cluster; each part of the cluster adds its methods in its own file (cluster_routes.go).
type Cluster interface {
	ClusterRoutes
}
