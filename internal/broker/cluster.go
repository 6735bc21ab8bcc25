package broker

import (
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// The two ports between the broker and the cluster of its node, one each way: Cluster is
// what the broker asks of the cluster, ClusterHost what it offers the cluster. Package
// cluster implements the first and calls the second (internal/cluster/host.go, the one
// place it does); the server (internal/server) connects the two, so that this package
// imports nothing of the cluster's: a single node (Options.Cluster nil) costs one nil
// test on each path that asks, and links no cluster code into the broker's.

// Cluster is what the broker asks of the cluster this node is part of.
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

// ClusterHost is what the broker offers the cluster of its node; *Broker implements it.
// The cluster calls it from its own goroutines, never from a poller's: each method says
// which, whether it may block, and who owns the bytes. None may call back into the
// cluster unless it says so. Adding a method is adding it here, to *Broker, and to
// internal/cluster/host.go's helpers (and the test hosts that stand in for a broker).
type ClusterHost interface {
	// Client-id ownership (cluster_owner.go).

	// Fence closes this node's connection of each client id in ids (v5 DISCONNECT 0x8E)
	// if it was opened under a claim older than epoch: the ids were claimed by another
	// node at epoch. Called on Raft's FSM goroutine right after the claim is applied,
	// without the FSM's lock: it must not block, since every later entry waits. ids is
	// the cluster's, read during the call only.
	Fence(epoch uint64, ids []string)
	// HandOver takes client id cid's session out of this node for the node that claimed
	// it at epoch: the connection is closed if it is open, the session deleted (memory
	// and store) and returned as a store image, not made with discard. Called on a gRPC
	// goroutine of the claiming node's request; it may wait for the store's commit. The
	// image is the caller's.
	HandOver(cid string, epoch uint64, discard bool) HandoverResult
	// SelfFence closes every client connection (v5 DISCONNECT 0x9C): this node has lost
	// the Raft leader for the lease. Called on the cluster's lease goroutine; it must
	// return soon, as the lease watch goes on after it.
	SelfFence()

	// The replicated retained set (cluster_retained.go). Both run on Raft's FSM goroutine
	// under the FSM's lock (lock order: the FSM's, then the broker's retMu): they must not
	// call back into the cluster, and may wait only for room in the store's queue
	// (backpressure reaches Raft's apply). Only the host attached when the cluster starts
	// receives them.

	// ApplyRetained makes m topic's retained message; nil clears the topic. m is owned
	// and immutable, and the broker may keep it; topic is valid during the call.
	ApplyRetained(topic []byte, m *session.Message)
	// ReplaceRetained replaces the whole retained set but $SYS's (a snapshot restored):
	// every topic each yields is set, every other topic is cleared.
	ReplaceRetained(each func(yield func(topic []byte, m *session.Message) bool))

	// Routes and forwarded messages (cluster_routes.go).

	// BeginForwarded starts delivering a batch of messages another node forwarded
	// (Inbound.Deliver); the caller Ends it, on the same goroutine. Called on the
	// goroutine that serves a peer's forwarding stream, and on a forwarding link's when a
	// shared message no peer's member took goes to an offline member here. It does not
	// block; End may wait for the store.
	BeginForwarded() *Inbound
	// RoutedFilters calls fn once with every filter that has a local subscriber, each
	// once, while no AddRoute or RemoveRoute runs (fn runs under the broker's routeMu), so
	// that the table version fn reads is the set's. Called on a route link's goroutine
	// for a peer's snapshot; fn must not call into the broker. filters is fn's to keep.
	RoutedFilters(fn func(filters []string))

	// The admin API and $SYS (admin.go, sysfigures.go, local.go).

	// Sessions returns up to limit sessions that f selects, from ID cursor on, and the
	// cursor of the next page (0: the end), for a peer's listing (on a gRPC goroutine) or
	// this node's admin API: a bounded walk, no copy of the table. The page is the
	// caller's.
	Sessions(cursor uint32, limit int, f SessionFilter) (page []SessionInfo, next uint32)
	// Figures returns this node's figures that the cluster sums into $SYS, on the
	// cluster's $SYS goroutine and a peer's gRPC goroutine: atomic loads and one lock.
	Figures() SysFigures
	// Publish publishes a message as the embedding program would, with the broker as
	// origin: the cluster's $SYS totals, retained, at QoS 0, on the cluster's $SYS
	// goroutine. The payload is copied.
	Publish(topic string, payload []byte, qos uint8, retain bool) error
}

var _ ClusterHost = (*Broker)(nil)

// A ClaimResult is what came of a claim (ClusterOwner.Claim).
type ClaimResult struct {
	// Epoch is the claim's epoch: the log index of the entry that made it.
	Epoch uint64
	// Moved: another node owned the id before; a session of it on this node is stale.
	Moved bool
	// Session is the session the previous owner handed over (a store.Image); nil when it
	// had none, started clean, or could not be asked (a node that failed: its sessions
	// are lost, docs/cluster-owner.md).
	Session []byte
	// Foreign: the claim was refused, another identity owns the id (Refuse); nothing
	// changed anywhere.
	Foreign bool
	// Named: the cluster's entry names the claimant's identity now (unsettledLocked).
	Named bool
	// Err: the claim was not applied (no leader in time, closing); refuse the CONNECT.
	Err error
}

// A HandoverOutcome is what a hand-over did (ClusterHost.HandOver).
type HandoverOutcome uint8

const (
	// NoSession: there was none here; nothing changed. The zero HandoverResult.
	NoSession HandoverOutcome = iota
	// HandedOver: the session left this node; Image is it (nil with discard).
	HandedOver
	// Busy: a CONNECT of the id here is between its claim and its CONNACK; ask again.
	Busy
	// Superseded: this node's claim of the id is newer than the epoch asked for;
	// nothing changed.
	Superseded
	// Failed: the hand-over failed; Err says why.
	Failed
)

// A HandoverResult is the answer of ClusterHost.HandOver.
type HandoverResult struct {
	Outcome HandoverOutcome
	Image   []byte // HandedOver: the session as a store.Image; the caller's
	Err     error  // Failed: why
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
