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

// Cluster is what the broker asks of the cluster this node is part of, one interface
// per part, each declared below with the values it takes; the broker's side of each part
// is the file named beside it. Methods are called from the pollers and must not block
// unless they say so. Adding a method is adding it to its part here and to package
// cluster (and the test fakes that stand in for a cluster).
type Cluster interface {
	ClusterOwner    // cluster_owner.go: one client id, one live connection
	ClusterRoutes   // cluster_routes.go: routes and forwarding
	ClusterRetained // cluster_retained.go: the retained set is the cluster's
	Redirector
}

// ClusterOwner is the cluster's side of client-id ownership.
type ClusterOwner interface {
	// Claim claims client id who.ClientID for this node; done is called once, on another
	// goroutine, with the outcome, once the claim is applied (and the session handed
	// over) or refused. Claim never blocks.
	Claim(who Claimant, done func(ClaimResult))
	// Release ends this node's claim of cid made at epoch: its session ended.
	Release(cid string, epoch uint64)
	// Attached names identity as the owner of cid's session, which a CONNECT attached to
	// under this node's claim at epoch, whose outcome was not Named.
	Attached(cid string, epoch uint64, identity string)
	// Owner is the owner of cid and its epoch as this node's applied log says.
	Owner(cid string) (node string, epoch uint64)
	// NodeName is this node's name.
	NodeName() string
	// Serving reports whether this node may serve clients (in contact with the Raft
	// leader and caught up); if not, ref is another node's MQTT address, or "".
	Serving() (ok bool, ref string)
	// ServingAt is Serving at now (Unix ns) without the reference: an atomic load, asked
	// on every read of a connected client's bytes, so that a node waking from a pause
	// serves no packet before it knows it may.
	ServingAt(now int64) bool
	// WritableAt reports whether this node may still write to its clients at now (Unix
	// ns): its lease has not ended (a little after serving ends, so that the DISCONNECTs
	// of a self-fence go out). An atomic load, asked before every write to a connected
	// client's socket (the listener's write fence), so that a node waking from a pause
	// writes nothing, not even what it had encoded before.
	WritableAt(now int64) bool
}

// A Claimant is a CONNECT claiming its client id.
type Claimant struct {
	ClientID string
	// Identity is the CONNECT's identity as every node names it (identityName): the
	// cluster records whose session it gives the id to.
	Identity string
	// Discard lets the previous owner node drop the session rather than send it.
	Discard bool
	// Refuse: the CONNECT's foreign_session is refuse. A client id the cluster knows
	// another identity owns is not taken (Foreign), so nothing of it is touched.
	Refuse bool
}

// ClusterRoutes is the routing part of Cluster. Its methods may be called from any
// goroutine, the pollers' included: none blocks.
type ClusterRoutes interface {
	// AddRoute tells of a new local subscription to filter: its first (first), which
	// makes filter a route, or a later one, whose SUBACK waits for the route too (it is
	// told only with done). It reports wait when done is to be called once every live
	// peer has acknowledged the route (bounded by failure detection); false when they
	// have already, and done is not called. The broker tells first subscriptions and
	// last leavings in the order its index had them.
	AddRoute(filter string, first bool, done func()) (wait bool)
	// RemoveRoute tells that filter's last local subscription is gone.
	RemoveRoute(filter string)
	// RemoteGroup reports whether a peer has members of shared group share
	// ("$share/{group}/{filter}").
	RemoteGroup(share string) bool
	// Forward queues o.Msg for every peer whose routes match its topic, and returns how
	// many nodes it goes to. The message may be borrowed: Forward copies what it keeps.
	// A non-nil done is called once for each of those nodes: when the node has
	// acknowledged its copy, when the cluster gave the copy up (the node was declared
	// gone) or dropped it (a shared message no member anywhere took). It is called from
	// any goroutine, possibly before Forward returns, and must not block; after Close,
	// a copy still in flight is never settled.
	Forward(o *Outbound, done func()) (nodes int)
	// ForwardShared gives m to one node that has members of shared group share, for a
	// message a member here left unacknowledged (spec 4.8.2), and reports whether one
	// will take it.
	ForwardShared(m *session.Message, share string) bool
}

// An Outbound is a message handed to the cluster after local delivery.
type Outbound struct {
	Msg *session.Message
	// Served names the shared groups ("$share/{group}/{filter}") a local online member
	// took: the cluster does not give the message to those groups again.
	Served []string
}

// ClusterRetained is the cluster's side of retained messages.
type ClusterRetained interface {
	// Retain hands the retained change m to the cluster. m may be borrowed: Retain
	// copies it. It does not block. A non-nil done is called once: applied when this
	// node has applied the change, not applied when the cluster gave it up (no leader
	// in time, this node fenced itself, Close) or dropped it (a QoS 0 change that found
	// the cluster's queue full). It is called from any goroutine, possibly before Retain
	// returns, and must not block.
	Retain(m *session.Message, done func(applied bool))
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
	// under the FSM's lock (lock order: the FSM's, then the broker's retained.mu): they
	// must not call back into the cluster, and may wait only for room in the store's
	// queue (backpressure reaches Raft's apply). Only the host attached when the cluster
	// starts receives them.

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
