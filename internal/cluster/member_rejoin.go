package cluster

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Rejoining failed members. memberlist stops gossiping to a member GossipToTheDeadTime
// (30s) after declaring it dead and then forgets it: it never contacts it again. The join
// loop joins the seeds again only when a node is alone, so after a partition that lasted
// longer, two sides that each have company would stay apart forever (a split that never
// heals). So every rejoinInterval a node joins the members it knows failed (dead, not
// left: a member that left said goodbye): a TCP push-pull with each that answers, which
// merges the two sides' member lists; gossip does the rest. A failed member that is
// really gone costs a refused or timed-out dial per interval.
//
// Each member is first dialled (TCP, on its gossip port) with a dial that Close cancels,
// and joined only if that answers: memberlist's own dial cannot be cancelled and waits
// out its TCP timeout (10s) on an address that drops packets, which would hold up Close.
// The join loop asks its seeds the same way.

const (
	// rejoinInterval is how often a node tries its failed members; a healed partition
	// is whole again within about this long after memberlist gave up on it.
	rejoinInterval = 10 * time.Second
	// rejoinBatch bounds the members tried at once (dialled concurrently: a dial to a
	// silent address takes rejoinDialTimeout); more failed members are picked at random
	// from round to round.
	rejoinBatch = 8
	// rejoinDialTimeout bounds the dial that checks a failed member answers.
	rejoinDialTimeout = 2 * time.Second
)

// answers reports whether something listens at the gossip address addr: a dial on the
// node's network (TCP on the host's) that ctx cancels. (memberlist reads the closed
// connection as an empty stream and drops it without a word.)
func (m *membership) answers(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, rejoinDialTimeout)
	defer cancel()
	conn, err := m.net.Dial(ctx, addr)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// failed returns the gossip addresses of the members this node knows failed.
func (m *membership) failed() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name, g := range m.gone {
		if _, back := m.live[name]; !back && g.State == "dead" {
			out = append(out, g.Addr)
		}
	}
	return out
}

// rejoin joins the failed members every interval until ctx ends.
func (m *membership) rejoin(ctx context.Context, every time.Duration) {
	for {
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return
		}
		addrs := m.failed()
		rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
		live := m.answering(ctx, addrs[:min(len(addrs), rejoinBatch)])
		if len(live) == 0 {
			continue
		}
		if n, err := m.ml.Join(live); n > 0 {
			m.log.Info("cluster: rejoined failed members", "addrs", live, "members", m.ml.NumMembers())
		} else {
			m.log.Debug("cluster: failed members answer but do not join", "addrs", live, "err", err)
		}
	}
}

// answering returns those of addrs that answer (m.answers), asked all at once.
func (m *membership) answering(ctx context.Context, addrs []string) []string {
	ok := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { ok[i] = m.answers(ctx, addr) })
	}
	wg.Wait()
	var out []string
	for i, addr := range addrs {
		if ok[i] {
			out = append(out, addr)
		}
	}
	return out
}
