// Package cluster makes several bifrost nodes act as one broker. It is built on engines,
// not home-made protocols:
//
//   - membership, failure detection and node metadata: hashicorp/memberlist (SWIM gossip)
//     on cluster.bind (member.go, member_meta.go);
//   - what must be consistent: hashicorp/raft (raft.go), whose state machine is its own
//     package, internal/cluster/fsm: pure (it imports neither memberlist nor gRPC), it
//     holds the cluster's identity, client-id ownership, retained messages and auth
//     files; this package makes its commands (member_identity.go, member_reconcile.go,
//     owner.go, retained.go, auth_files.go);
//   - node-to-node calls: gRPC (net_rpc.go, clusterpb/), on cluster.rpc, a port Raft
//     shares: an accept mux reads each connection's first byte, 'R' for Raft
//     (net_transport.go), anything else for gRPC (net_mux.go).
//
// Files, by part (a file's prefix names its part):
//
//   - cluster.go the Cluster the broker holds (its broker.Cluster), Start and Close;
//     host.go the broker as the cluster calls it (broker.ClusterHost, connected by
//     Attach), the one file that does; doc.go this description; metrics.go the
//     Prometheus series;
//   - member*.go membership: member.go the memberlist delegates, member_meta.go node
//     metadata, member_suspicion.go suspects from failed probes, member_rejoin.go a
//     failed node coming back, member_bootstrap.go forming a cluster, member_reconcile.go
//     the Raft configuration following the members, member_identity.go the cluster id,
//     member_refusal.go strangers refused at gossip, member_load.go the load figure and
//     redirection;
//   - raft*.go Raft: raft.go its setup, raft_leader.go the leader this node follows,
//     raft_log.go the engines' log lines;
//   - net_*.go the rpc port: net_network.go the Network it and gossip run on (the host's,
//     or the tests' in-memory one, net_mem_test.go), net_mux.go the accept mux,
//     net_transport.go Raft's transport, net_rpc.go the gRPC server and clients,
//     net_secret.go the secret's keys and authority, net_link.go a stream to a peer kept
//     up;
//   - owner*.go client-id ownership: owner.go claims and releases, owner_pending.go claims
//     known before the log applies them, owner_again.go a claim applied twice,
//     owner_fence.go and owner_fence_watch.go the lease and the fence,
//     owner_handover.go a session handed over between nodes, owner_metrics.go;
//   - routes*.go routes per peer, forward*.go forwarding (forward_frame.go its frames);
//   - retained*.go retained messages in the log; auth_*.go the auth files: auth_files.go
//     in the log, auth_local.go this node's (the server's auth state put in force, the
//     seed at start, the proposal on reload);
//   - admin_*.go what the admin API and $SYS read: admin_sessions.go every node's
//     sessions, admin_status.go the /cluster view (Status, a clusterlink.Status),
//     admin_sys.go the $SYS totals.
//
// What is consistent (the Raft log, applied by every node in the same order): the cluster
// id, client-id ownership, retained messages and auth files. What is eventual (gossip and
// gRPC): liveness, node metadata such as the load figure, routes and forwarded messages.
//
// Publish anywhere, receive anywhere: each node streams its routes (the filters its
// sessions subscribe to) to every live peer, which keeps them in a remote index of node
// ids (routes.go, routes_stream.go); a PUBLISH matching a peer's routes crosses to it once,
// on one batched stream per peer (forward.go, forward_link.go, forward_frame.go). The broker's side
// of it, SUBACK means routed and the PUBACK waiting for the peers included, is
// internal/broker/cluster_routes.go; routes_broker.go is the Cluster's.
//
// Forming a cluster (member_bootstrap.go): a node without Raft state never forms one alone
// unless bootstrap_expect is 1. Once it sees bootstrap_expect members without state or
// cluster id, and each of them sees the same set, every one of them bootstraps Raft with
// the identical configuration (raft accepts identical ones; Consul does the same), and the
// first leader writes a random cluster id. A node with state never bootstraps. Later the
// leader adds nodes that join (voters up to 5, non-voters beyond) and removes those that
// leave gracefully (Close); a node that fails stays in the configuration, since it may
// come back (member_reconcile.go).
//
// Every node advertises the cluster id in its metadata (and keeps it in its data
// directory, so it knows it from its start); a node advertising another id is refused by
// memberlist's alive and merge delegates: two clusters never merge. With cluster.secret,
// gossip is encrypted with a key derived from it, and the rpc port speaks TLS with an
// authority derived from it, so a node without the secret is refused on every path
// (net_secret.go); refusals are counted and logged (member_refusal.go).
//
// The admin API of any node lists the sessions of one node or of all: each node answers
// its peers a page of its own (admin_sessions.go, a gRPC call), and $SYS's cluster totals are
// each node's figures summed (admin_sys.go).
//
// The Cluster type (cluster.go) is what the broker holds: Start, Close, Apply (on the
// leader, or forwarded to it, and to the next one when the leader changes: raft_leader.go),
// the leader, the members, Wait for the cluster to be formed, and the Prometheus metrics
// (metrics.go). docs/cluster.md is the user's page; docs/cluster-owner.md and
// docs/cluster-retained.md the design of ownership and of retained messages.
package cluster
