package broker

// Cluster is what the broker needs of the cluster its node belongs to (internal/cluster
// implements it; the server connects the two). Options.Cluster is nil for a single node,
// which costs one nil test on the paths that ask. The methods are grouped by concern in
// the files cluster_*.go.
type Cluster interface {
	ClusterOwner // cluster_owner.go: one client id, one live connection
}
