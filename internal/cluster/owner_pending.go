package cluster

import "sync"

// This node's claims ahead of its own log. A claim's outcome comes from the node that
// applied it, the leader; on a follower the CONNECT may attach before the follower's own
// FSM has applied the entry, and meanwhile that FSM applies earlier claims of other
// nodes, which fence this node's connections of their ids (fence, host.go). The broker
// keeps no epoch per connection of its own: it asks Owner, which therefore answers a
// claim of this node whose outcome is known as the owner from then on, ahead of the local
// table. Every such claim is newer than every entry the local FSM has applied (it is not
// applied here yet), so it overrides the table's entry until the FSM applies it, and the
// record goes: it lives for the follower's apply lag, milliseconds, not per connection.

// pendingClaims holds the claim batches of this node that its FSM has not applied yet.
type pendingClaims struct {
	mu      sync.Mutex
	last    uint64            // the index of the last command the local FSM applied
	byID    map[string]uint64 // client id → the epoch of its latest pending claim
	batches []pendingBatch    // in no order; a few (claimWorkers in flight)
}

type pendingBatch struct {
	epoch uint64
	ids   []string
}

// add records the claims of ids at epoch, whose outcome is known, unless the local FSM
// has applied that entry already. It is called before the outcomes are told.
func (p *pendingClaims) add(epoch uint64, ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch <= p.last {
		return
	}
	if p.byID == nil {
		p.byID = make(map[string]uint64, len(ids))
	}
	for _, id := range ids {
		p.byID[id] = max(p.byID[id], epoch)
	}
	p.batches = append(p.batches, pendingBatch{epoch: epoch, ids: ids})
}

// applied notes that the local FSM has applied the entry at index: the batches up to it
// are in its table now (or in a snapshot it restored, applied before it).
func (p *pendingClaims) applied(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = max(p.last, index)
	if len(p.batches) == 0 {
		return
	}
	keep := p.batches[:0]
	for _, b := range p.batches {
		if b.epoch > index {
			keep = append(keep, b)
			continue
		}
		for _, id := range b.ids {
			if p.byID[id] == b.epoch {
				delete(p.byID, id)
			}
		}
	}
	clear(p.batches[len(keep):])
	p.batches = keep
	if len(keep) == 0 {
		p.byID = nil // a map keeps its size: a storm's would stay
	}
}

// epoch returns the epoch of this node's pending claim of cid, if any.
func (p *pendingClaims) epoch(cid string) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byID[cid]
	return e, ok
}
