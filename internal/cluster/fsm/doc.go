// Package fsm is the cluster's replicated state machine: what every node applies from the
// Raft log, in the same order, so that every node holds the same state. It is pure: no
// network, no clock, no randomness (a command carries whatever it needs, such as the new
// cluster id or a retained message's deadline), so its tests run it alone, and it imports
// hashicorp/raft, never memberlist or gRPC. internal/cluster runs it: it makes the
// commands, hands their encoding to Raft (on the leader, or forwarded to it), and reads
// the state back through the FSM's methods.
//
// The FSM (fsm.go) is a raft.FSM: Raft calls Apply, Snapshot and Restore on its FSM
// goroutine, one at a time; the node's Hooks run there too, after each entry. A Command is
// one change; the set is closed, each with its kind byte, never reused. A log entry is
// [entry version][kind][body]; an entry that does not decode, or that its command refuses,
// changes nothing, identically on every node, and the node that wrote it is told
// (Response). A snapshot is [snapshot version] then one section per part of the state,
// [section][length][body]; a build reads the snapshots and log entries older builds
// wrote, so the Raft log and snapshots on a node's disk still apply after an upgrade.
//
// The cluster's identity (identity.go): a random id, chosen once by the first Identity
// entry, which every member advertises so that two clusters never merge.
//
// Client-id ownership (owners.go): client id → owner node, epoch (the Raft index of the
// claim) and owner identity. Claims give client ids to a node and name each one's previous
// owner; Releases end claims; Attaches name the identities of sessions whose claims left
// them unknown. The table keeps a 12-byte digest of each id, not the id: every node holds
// an entry per session anywhere in the cluster.
//
// Retained messages (retained.go): topic → message, the same set on every node, set,
// cleared and expired by Retains entries; each change is handed to the broker's retained
// index on the node (RetainedStore), which shares the message.
//
// Auth files (auth.go): the contents of each password and ACL file the cluster enforces,
// keyed by auth block and kind, set by AuthFiles entries (a seed sets only what the
// cluster has none of).
//
// Shard placement (placement.go): the shards that replicate persistent sessions, each a
// Raft group of its own: their count and replicas, chosen once by a Shards entry, and each
// shard's voters (the target its group follows), set by Places entries that the leader
// plans by rendezvous hashing (placement_plan.go), one voter at a time, and confirmed by
// the shard's leader with ShardReady.
//
// Files: doc.go this description; fsm.go the FSM, commands, log entries and snapshots;
// identity.go the cluster id; owners.go client-id ownership; retained.go retained
// messages; auth.go auth files; placement.go the shard table, placement_plan.go its
// planner; wire.go the encoding all of them write (unsigned varints, length-prefixed
// strings).
package fsm
