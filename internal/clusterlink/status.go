package clusterlink

// Status is a node's view of the cluster (Views.Status), served as JSON at GET /cluster
// on the HTTP endpoint: what an operator and the process tests (test/cluster) look at.
// Its JSON is the endpoint's contract: fields are added, never renamed.
type Status struct {
	Node      string `json:"node"`
	ClusterID string `json:"cluster_id"` // "" until the cluster is formed
	// State is this node's Raft state: Follower, Candidate, Leader, Shutdown.
	State string `json:"state"`
	// Leader is the leader's name as this node knows it; "" when it knows none.
	Leader string `json:"leader"`
	// Formed: the cluster has an id and a leader, and this node is in its configuration.
	Formed      bool           `json:"formed"`
	Term        uint64         `json:"term"`
	LastIndex   uint64         `json:"last_index"`
	CommitIndex uint64         `json:"commit_index"`
	Members     []MemberStatus `json:"members"`
	Auth        AuthStatus     `json:"auth"`
}

// AuthStatus is which auth files are in force: the digest (auth.Digest) of what this node
// enforces and of what the Raft log holds. Every node of a cluster in agreement shows the
// same, and each member's auth_digest is its in_force.
type AuthStatus struct {
	InForce    string `json:"in_force"`
	Replicated string `json:"replicated"`
	Index      uint64 `json:"index"` // the log index of the replicated files; 0: none yet
}

// MemberStatus is one member: every node gossip knows, and every server of the Raft
// configuration (a server gossip has not heard of has gossip state "unknown").
type MemberStatus struct {
	Name string `json:"name"`
	// State is the gossip state: alive, suspect, leaving, dead (failed), left
	// (gracefully), or unknown (a server of the Raft configuration gossip has not heard
	// of).
	State     string  `json:"state"`
	Raft      string  `json:"raft"` // voter, nonvoter, or "" when not in the configuration
	Gossip    string  `json:"gossip,omitempty"`
	RPC       string  `json:"rpc,omitempty"`
	MQTT      string  `json:"mqtt,omitempty"`
	ClusterID string  `json:"cluster_id,omitempty"`
	Load      float64 `json:"load"`
	// AuthDigest is the digest of the auth files the member enforces, as it gossips it.
	AuthDigest string `json:"auth_digest,omitempty"`
}
