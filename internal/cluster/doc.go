// Package cluster makes several bifrost nodes act as one broker. It is built on engines,
// not home-made protocols:
//
//   - membership, failure detection and node metadata: hashicorp/memberlist (SWIM gossip)
//     on cluster.bind (membership.go, meta.go);
//   - what must be consistent: hashicorp/raft (raft.go), whose state machine is its own
//     package, internal/cluster/fsm: pure (it imports neither memberlist nor gRPC), it
//     holds the cluster's identity, client-id ownership, retained messages and auth files;
//     this package makes its commands (identity.go and reconcile.go, owner.go, retained.go,
//     authfiles.go);
//   - node-to-node calls: gRPC (rpc.go, clusterpb/), on cluster.rpc, a port Raft shares: an
//     accept mux reads each connection's first byte, 'R' for Raft (transport.go), anything
//     else for gRPC (mux.go).
//
// What is consistent (the Raft log, applied by every node in the same order): the cluster
// id, client-id ownership, retained messages and auth files. What is eventual (gossip and
// gRPC): liveness, node metadata such as the load figure, routes and forwarded messages.
//
// Publish anywhere, receive anywhere: each node streams its routes (the filters its
// sessions subscribe to) to every live peer, which keeps them in a remote index of node
// ids (routes.go, routes_stream.go); a PUBLISH matching a peer's routes crosses to it once,
// on one batched stream per peer (forward.go, forward_link.go, frame.go). The broker's side
// of it, SUBACK means routed and the PUBACK waiting for the peers included, is
// internal/broker/cluster_routes.go; routes_broker.go is the Cluster's.
//
// Forming a cluster (bootstrap.go): a node without Raft state never forms one alone
// unless bootstrap_expect is 1. Once it sees bootstrap_expect members without state or
// cluster id, and each of them sees the same set, every one of them bootstraps Raft with
// the identical configuration (raft accepts identical ones; Consul does the same), and the
// first leader writes a random cluster id. A node with state never bootstraps. Later the
// leader adds nodes that join (voters up to 5, non-voters beyond) and removes those that
// leave gracefully (Close); a node that fails stays in the configuration, since it may
// come back (reconcile.go).
//
// Every node advertises the cluster id in its metadata (and keeps it in its data
// directory, so it knows it from its start); a node advertising another id is refused by
// memberlist's alive and merge delegates: two clusters never merge. With cluster.secret,
// gossip is encrypted with a key derived from it, and the rpc port speaks TLS with an
// authority derived from it, so a node without the secret is refused on every path
// (secret.go); refusals are counted and logged (refusal.go).
//
// The admin API of any node lists the sessions of one node or of all: each node answers
// its peers a page of its own (sessions.go, a gRPC call), and $SYS's cluster totals are
// each node's figures summed (sys.go).
//
// The Cluster type (cluster.go) is what the broker holds: Start, Close, Apply (on the
// leader, or forwarded to it, and to the next one when the leader changes: leader.go),
// the leader, the members, Wait for the cluster to be formed, and the Prometheus metrics
// (metrics.go). docs/cluster.md is the user's page; docs/cluster-owner.md and
// docs/cluster-retained.md the design of ownership and of retained messages.
package cluster
