package cluster

import (
	"context"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Session hand-over: after this node's claim of a client id was applied and named
// another previous owner, this node asks that owner for the session (Handover). The
// previous owner closes its connection of the id if it is still open, deletes the session
// and returns it; the broker here restores it and answers session present 1.
//
// A previous owner that is not a live member cannot be asked: this node waits the lease
// (by then that node, if it still runs, has fenced itself: owner_fence.go) and the session that
// lived there is lost. So is one whose owner does not answer within the lease (paused,
// cut off, overloaded): it is treated as a dead one, since by then it has stopped writing
// to its clients whatever it is doing. Either applied the claim, and closed its
// connection of the id, or it has not heard from the leader since before the claim was
// applied, and its lease has run out. The lease is the longest a hand-over takes, so
// that a CONNECT gets its answer within cluster.claim_timeout (owner.go, entryBy).

// handoverRetry is the pause before asking again a node whose own CONNECT of the id is
// between its claim and its CONNACK (busy): a Raft commit.
const handoverRetry = 20 * time.Millisecond

// handover finishes pc's claim at epoch, whose previous owner is prev (another node);
// named: the entry names pc's identity (ClaimResult.Named).
func (c *Cluster) handover(pc pendingClaim, epoch uint64, prev string, named bool) {
	start := time.Now()
	if prev == unknownOwner {
		c.afterLease(pc, epoch, prev, named, "claimed twice, and the first outcome is not known here", start)
		return
	}
	m, live := c.ms.lookup(prev)
	if !live || m.MetaErr != nil || m.Meta.RPC == "" {
		c.afterLease(pc, epoch, prev, named, "not a live member", start)
		return
	}
	ok := c.spawn("cluster handover", func(ctx context.Context) {
		ctx, cancel := context.WithDeadline(ctx, start.Add(time.Duration(c.cfg.Lease)))
		defer cancel()
		req := &clusterpb.HandoverRequest{ClientId: pc.cid, Epoch: epoch, Node: c.cfg.NodeName, Discard: pc.clean}
		for {
			cl, err := c.peers.client(prev, m.Meta.RPC)
			var reply *clusterpb.HandoverReply
			if err == nil {
				reply, err = cl.Handover(ctx, req)
			}
			switch status.Code(err) {
			case codes.OK:
				claim := broker.ClaimResult{Epoch: epoch, Moved: true, Named: named}
				if reply.Found && !pc.clean {
					claim.Session = reply.Session
					c.own.counts.handed.Add(1)
				} else {
					c.own.counts.handedNone.Add(1)
				}
				pc.done(claim)
				return
			case codes.Aborted:
				// prev claimed the id again after us: our connection is fenced once
				// this node applies that claim. Nothing to take over.
				c.own.counts.handedNone.Add(1)
				pc.done(broker.ClaimResult{Epoch: epoch, Moved: true, Named: named})
				return
			case codes.Unavailable:
				if st, _ := status.FromError(err); st != nil && st.Message() == busyMessage {
					select {
					case <-ctx.Done():
					case <-time.After(handoverRetry):
						continue
					}
				}
			}
			if c.ctx.Err() != nil {
				pc.done(broker.ClaimResult{Err: errClosed})
				return
			}
			why := err.Error()
			if ctx.Err() != nil {
				why = "no answer within the lease"
			}
			c.afterLease(pc, epoch, prev, named, why, start)
			return
		}
	})
	if !ok {
		pc.done(broker.ClaimResult{Err: errClosed})
	}
}

// afterLease finishes pc's claim without a session, once a lease has passed from when
// this node knew it could not reach prev (from: it began to try), or from when it learned
// that prev failed, if that was earlier: by then a previous owner that could not be asked
// has closed its connections if it lost the leader, or closed this client's when it
// applied the claim.
//
// memberlist declares a node dead only after the others' probes went unanswered, so it
// had lost the majority, and with it the leader, by then. So the clients of a dead node
// wait one lease in all, not one each: a reconnect storm of its 19,000 clients is not
// held up by 19,000 lease waits in a row.
// It waits on a goroutine of the cluster's, so that Close waits for the answer.
func (c *Cluster) afterLease(pc pendingClaim, epoch uint64, prev string, named bool, why string, from time.Time) {
	c.own.counts.lost.Add(1)
	c.log.Debug("cluster: session not handed over; it is lost", "client", pc.cid, "previous_owner", prev, "why", why)
	if at, ok := c.ms.goneAt(prev); ok && at.Before(from) {
		from = at
	}
	wait := time.Until(from.Add(time.Duration(c.cfg.Lease)))
	if wait <= 0 {
		pc.done(broker.ClaimResult{Epoch: epoch, Moved: true, Named: named})
		return
	}
	ok := c.spawn("cluster lease wait", func(ctx context.Context) {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			pc.done(broker.ClaimResult{Err: errClosed})
		case <-t.C:
			pc.done(broker.ClaimResult{Epoch: epoch, Moved: true, Named: named})
		}
	})
	if !ok {
		pc.done(broker.ClaimResult{Err: errClosed})
	}
}

// busyMessage marks the Unavailable answer of a node whose CONNECT of the id is between
// its claim and its CONNACK.
const busyMessage = "busy: a connect of this client id is in progress"

// Handover takes a session out of this node for the node that claimed it.
func (s rpcServer) Handover(_ context.Context, req *clusterpb.HandoverRequest) (*clusterpb.HandoverReply, error) {
	r := s.c.handOver(req.ClientId, req.Epoch, req.Discard)
	switch r.Outcome {
	case broker.Failed:
		return nil, status.Error(codes.Internal, r.Err.Error())
	case broker.Superseded:
		return nil, status.Error(codes.Aborted, "this node claimed the client id after the caller")
	case broker.Busy:
		return nil, status.Error(codes.Unavailable, busyMessage)
	case broker.HandedOver:
		return &clusterpb.HandoverReply{Found: true, Session: r.Image}, nil
	}
	return &clusterpb.HandoverReply{}, nil // NoSession
}
