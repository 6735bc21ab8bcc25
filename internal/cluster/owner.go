package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

// One client id, one live connection, cluster-wide. A CONNECT claims its client id
// (Claim): the claims of concurrent CONNECTs go to the log together, in one entry per
// batch, by a few claim workers, so a reconnect storm costs a few Raft entries, not one
// per client. The entry's result names each id's previous owner: none or this node, and
// the broker goes on with its local session; another node, and the session is asked of it
// (owner_handover.go). Every node applying a claim for another node closes its own
// connection of the id (fence, host.go): the fence. When a session ends its node releases
// the entry (Release, batched the same way), so the table holds the live and persistent
// sessions only. A claim carries its CONNECT's identity once every member can apply that
// (identityProtocol): one under foreign_session: refuse is refused by the table itself
// when another identity owns the id, and fences nothing (fsm/owners.go).

// Ownership settings, with their reasons.
const (
	// claimWorkers is how many claim entries may be in the log at once: while one
	// commits, the next batch gathers.
	claimWorkers = 4
	// maxClaimBatch bounds the client ids of one entry (a few tens of KiB).
	maxClaimBatch = 1024
	// releaseGather is how long released ids gather before they go to the log: releases
	// only keep the table small, they may wait.
	releaseGather = 200 * time.Millisecond
	// maxPendingReleases bounds the releases waiting for a leader; beyond it they are
	// dropped (the entries stay until a later claim of the id replaces them).
	maxPendingReleases = 1 << 20
	// identityProtocol is the protocolVersion a member needs to apply claims with
	// identities; until every member has it, claims go without (fsm.Claims.As nil).
	identityProtocol = 3
)

// pendingClaim is a claim waiting for its batch.
type pendingClaim struct {
	cid    string
	clean  bool // the previous owner drops the session rather than send it
	as     fsm.ClaimAs
	fences uint64 // the times this node had fenced itself when the claim was made
	// entryBy is when its Raft entry must be applied: cluster.claim_timeout less the
	// lease, which a hand-over may take after it (owner_handover.go).
	entryBy time.Time
	done    func(broker.ClaimResult)
}

// ownership is a Cluster's side of client-id ownership.
type ownership struct {
	mu       sync.Mutex
	claims   []pendingClaim
	releases []fsm.Release
	attaches []fsm.Attach
	dropped  uint64 // releases and attaches dropped over maxPendingReleases

	claimWake   chan struct{}
	releaseWake chan struct{}

	fence   fenceState    // owner_fence.go
	counts  ownerCounts   // owner_metrics.go
	pending pendingClaims // owner_pending.go
	traces  claimTraces   // owner_again.go
}

func (o *ownership) init() {
	o.claimWake = make(chan struct{}, 1)
	o.releaseWake = make(chan struct{}, 1)
}

// startOwnership starts the claim and release workers and the lease watch (owner_fence.go),
// and registers ownership's metrics.
func (c *Cluster) startOwnership() {
	if c.metrics != nil {
		if err := registerOwnerMetrics(c.metrics, c); err != nil {
			c.log.Warn("cluster: ownership metrics not registered", "err", err)
		}
	}
	for range claimWorkers {
		c.spawn("cluster claims", c.claimLoop)
	}
	c.spawn("cluster releases", c.releaseLoop)
	c.spawn("cluster lease", c.leaseLoop)
}

// Claim claims client id who.ClientID for this node; done is called once, on another
// goroutine, with the outcome, after the claim is applied and the session handed over or
// known to be lost, or the claim refused (Foreign). Claim never blocks.
func (c *Cluster) Claim(who broker.Claimant, done func(broker.ClaimResult)) {
	o := &c.own
	entryBy := time.Now().Add(time.Duration(c.cfg.ClaimTimeout - c.cfg.Lease))
	as := fsm.ClaimAs{Who: fsm.WhoOf(who.Identity), Mode: fsm.TakeMoved}
	switch {
	case who.Refuse:
		as.Mode = fsm.TakeUnlessForeign
	case who.Discard:
		as.Mode = fsm.TakeDropped
	}
	pc := pendingClaim{cid: who.ClientID, clean: who.Discard && !who.Refuse, as: as,
		fences: c.own.counts.selfFenced.Load(), entryBy: entryBy, done: done}
	o.mu.Lock()
	o.claims = append(o.claims, pc)
	o.mu.Unlock()
	wake(o.claimWake)
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// claimLoop is a claim worker: it takes the waiting claims, up to a batch, applies them
// as one entry and hands out the outcomes.
func (c *Cluster) claimLoop(ctx context.Context) {
	o := &c.own
	for {
		o.mu.Lock()
		n := min(len(o.claims), maxClaimBatch)
		batch := append([]pendingClaim(nil), o.claims[:n]...)
		o.claims = append(o.claims[:0], o.claims[n:]...)
		more := len(o.claims) > 0
		o.mu.Unlock()
		if more {
			wake(o.claimWake) // another worker takes the rest
		}
		if n > 0 {
			c.applyClaims(ctx, batch)
			continue
		}
		select {
		case <-ctx.Done():
			o.mu.Lock()
			rest := o.claims
			o.claims = nil
			o.mu.Unlock()
			for _, pc := range rest {
				pc.done(broker.ClaimResult{Err: errClosed})
			}
			return
		case <-o.claimWake:
		}
	}
}

// applyClaims applies one batch and dispatches each outcome. Claims made before this
// node fenced itself fail, and so does the batch if it fences itself while the batch
// waits for the log (owner_fence_watch.go): their CONNECTs were refused by the fence. The
// entry must be applied by the latest entryBy of the batch (a claim whose own has passed
// by the time the batch is taken fails).
func (c *Cluster) applyClaims(ctx context.Context, batch []pendingClaim) {
	fences := c.own.counts.selfFenced.Load()
	ids := make([]string, 0, len(batch))
	as := make([]fsm.ClaimAs, 0, len(batch))
	keep := batch[:0]
	now := time.Now()
	var by time.Time
	for _, pc := range batch {
		switch {
		case pc.fences != fences:
			pc.done(broker.ClaimResult{Err: errFenced})
			continue
		case !now.Before(pc.entryBy):
			pc.done(broker.ClaimResult{Err: errClaimTimeout})
			continue
		}
		keep = append(keep, pc)
		ids = append(ids, pc.cid)
		as = append(as, pc.as)
		if pc.entryBy.After(by) {
			by = pc.entryBy
		}
	}
	if batch = keep; len(batch) == 0 {
		return
	}
	self := c.cfg.NodeName
	actx, cancel := context.WithDeadline(leaseBound(ctx), by)
	defer cancel()
	stop := c.untilFenced(actx, cancel, fences)
	cmd := fsm.Claims{Node: self, IDs: ids}
	if c.speaks(identityProtocol) {
		cmd.As = as
	}
	tr := c.own.traces.trace(ids, c.raft.CommitIndex())
	res, _, again, err := c.applyTracked(actx, cmd)
	var epoch uint64
	var out []fsm.Claimed
	if err == nil {
		epoch, out, err = fsm.DecodeClaimed(res, len(ids), cmd.As != nil)
	}
	if err == nil && again {
		out = c.firstOutcome(actx, tr, epoch, out, cmd.As != nil)
	}
	c.own.traces.end(tr)
	stop()
	if err != nil {
		for _, pc := range batch {
			pc.done(broker.ClaimResult{Err: err})
		}
		return
	}
	taken := ids
	for i := range out {
		if out[i].Foreign {
			taken = cmd.Taken(res)
			break
		}
	}
	c.own.counts.claims.Add(uint64(len(taken)))
	c.own.counts.foreign.Add(uint64(len(ids) - len(taken)))
	c.own.counts.entries.Add(1)
	c.own.pending.add(epoch, taken)
	for i, pc := range batch {
		switch o := out[i]; {
		case o.Foreign:
			pc.done(broker.ClaimResult{Foreign: true})
		case o.Prev == "" || o.Prev == self:
			pc.done(broker.ClaimResult{Epoch: epoch, Named: o.Named})
		default:
			c.handover(pc, epoch, o.Prev, o.Named)
		}
	}
}

// speaks reports whether every member can apply a command of protocol v (member.go).
func (c *Cluster) speaks(v uint8) bool { return c.ms != nil && c.ms.speaks(v) }

// errClaimTimeout fails a claim whose Raft entry was not applied within
// cluster.claim_timeout less the lease.
var errClaimTimeout = errors.New("cluster: the claim was not applied within cluster.claim_timeout less the lease (no leader took it in time)")

// Release ends this node's claim of cid made at epoch: its session ended. Releases are
// applied in batches, later; Release never blocks.
func (c *Cluster) Release(cid string, epoch uint64) {
	o := &c.own
	o.mu.Lock()
	if len(o.releases) < maxPendingReleases {
		o.releases = append(o.releases, fsm.Release{ID: cid, Epoch: epoch})
	} else {
		o.dropped++
	}
	o.mu.Unlock()
	wake(o.releaseWake)
}

// Attached names identity as the owner of the session of cid, which a CONNECT attached
// to under this node's claim at epoch: the claim left the entry's owner unknown
// (ClaimResult.Named false). Applied with the releases, later, and only once every
// member can apply it; Attached never blocks.
func (c *Cluster) Attached(cid string, epoch uint64, identity string) {
	o := &c.own
	a := fsm.Attach{ID: cid, Epoch: epoch, Who: fsm.WhoOf(identity)}
	o.mu.Lock()
	if len(o.attaches) < maxPendingReleases {
		o.attaches = append(o.attaches, a)
	} else {
		o.dropped++
	}
	o.mu.Unlock()
	wake(o.releaseWake)
}

// releaseLoop applies the waiting attaches and releases, gathered for releaseGather
// (the attaches first: a session that attached and ended since is named, then
// released); those a failed Apply leaves wait for the next round.
func (c *Cluster) releaseLoop(ctx context.Context) {
	o := &c.own
	node := c.cfg.NodeName
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.releaseWake:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(releaseGather):
		}
		if !c.speaks(identityProtocol) {
			o.mu.Lock()
			o.attaches = nil // a member could not apply them; the entries stay unknown
			o.mu.Unlock()
		}
		if drain(ctx, c, &o.attaches, func(b []fsm.Attach) Command { return fsm.Attaches{Node: node, IDs: b} }) {
			drain(ctx, c, &o.releases, func(b []fsm.Release) Command { return fsm.Releases{Node: node, IDs: b} })
		}
	}
}

// drain applies what waits in *q, in entries of up to maxBatchIDs that cmd makes, and
// reports whether it applied all of it; after a failed Apply the rest waits, and the
// loop is woken again unless the cluster is closing.
func drain[T any](ctx context.Context, c *Cluster, q *[]T, cmd func([]T) Command) bool {
	o := &c.own
	for {
		o.mu.Lock()
		n := min(len(*q), fsm.MaxBatchIDs)
		batch := append([]T(nil), (*q)[:n]...)
		o.mu.Unlock()
		if n == 0 {
			return true
		}
		if _, err := c.Apply(ctx, cmd(batch)); err != nil {
			if !errors.Is(err, errClosed) {
				c.log.Debug("cluster: ownership changes not applied; retrying", "ids", n, "err", err)
				wake(o.releaseWake)
			}
			return false
		}
		o.mu.Lock()
		*q = append((*q)[:0], (*q)[n:]...)
		o.mu.Unlock()
	}
}

// applied is the FSM's hook: a claim by another node fences this node's connections of
// the ids it took (not those it was refused); one of this node's is traced
// (owner_again.go).
func (c *Cluster) applied(cmd fsm.Command, index uint64, result []byte) {
	c.own.pending.applied(index)
	cl, ok := cmd.(fsm.Claims)
	if !ok {
		return
	}
	if cl.Node == c.cfg.NodeName {
		c.own.traces.applied(cl.IDs, index, result)
		return
	}
	ids := cl.Taken(result)
	if len(ids) == 0 {
		return
	}
	c.own.counts.fenced.Add(uint64(len(ids)))
	c.fence(index, ids)
}

// Owner returns the owner of client id cid and its epoch as this node's applied log
// says, or this node for a claim of its own whose outcome is known before the log here
// has it (owner_pending.go); "" when it has none.
func (c *Cluster) Owner(cid string) (node string, epoch uint64) {
	if e, ok := c.own.pending.epoch(cid); ok {
		return c.cfg.NodeName, e
	}
	if c.fsm == nil {
		return "", 0
	}
	return c.fsm.Owner(cid)
}

// NodeName is this node's name.
func (c *Cluster) NodeName() string { return c.cfg.NodeName }
