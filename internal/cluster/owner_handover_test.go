package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// TestLeaseFromDeath: a claim whose previous owner failed more than a lease ago is
// answered at once, without a session; one whose owner failed a moment ago, or that this
// node never saw, waits the rest of the lease. So the clients of a dead node wait one
// lease in all, not one each.
func TestLeaseFromDeath(t *testing.T) {
	lease := time.Hour // a wait that would hold the test up is one that was not cut short
	c := &Cluster{cfg: conf.Cluster{NodeName: "n1", Lease: conf.Duration(lease)}, log: slog.New(slog.DiscardHandler)}
	c.ms = newMembership("n1", c.log, nil, nil, nil, nil)
	c.ms.gone["old"] = Member{Name: "old", State: "dead", GoneAt: time.Now().Add(-2 * lease)}
	c.ms.gone["recent"] = Member{Name: "recent", State: "dead", GoneAt: time.Now()}

	// The waits are started, never run: a claim answered is one that did not wait.
	c.goFn = func(string, func(context.Context)) bool { return true }
	claim := func(prev string) (done bool) {
		c.afterLease(pendingClaim{cid: "x", done: func(broker.ClaimResult) { done = true }}, 7, prev, false, "test", time.Now())
		return done
	}
	if !claim("old") {
		t.Error("a claim of a node dead for two leases waited")
	}
	if claim("recent") || claim("never-seen") {
		t.Error("a claim of a node dead a moment ago, or never seen, did not wait")
	}
}
