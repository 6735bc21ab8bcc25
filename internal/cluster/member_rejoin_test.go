package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/hashicorp/memberlist"
)

// quickGossip shortens memberlist's timeouts so that a member is declared dead within
// about a second and forgotten (quickForget) a second later, with room left for -race on
// busy cores (members on one side must not suspect each other).
func quickGossip(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 2
	c.PushPullInterval = 500 * time.Millisecond
	c.GossipToTheDeadTime = quickForget
	c.TCPTimeout = 500 * time.Millisecond
}

// quickForget is quickGossip's GossipToTheDeadTime.
const quickForget = time.Second

// startMember starts a membership named name on the network n, its rejoin loop every
// rejoinEvery (none when 0).
func startMember(t *testing.T, n *memNet, name string, rejoinEvery time.Duration) *membership {
	t.Helper()
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := newMembership(name, log, n.node(name), func() Meta { return Meta{RPC: "127.0.0.1:1"} }, func() string { return "" }, nil)
	if err := m.start(&conf.Cluster{NodeName: name, Bind: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if rejoinEvery > 0 {
		wg.Go(func() { m.rejoin(ctx, rejoinEvery) })
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = m.shutdown()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, logs)
		}
	})
	return m
}

// aliveNames returns the names of the members m sees alive or suspect, sorted.
func (m *membership) aliveNames() []string {
	var out []string
	for _, mb := range m.members() {
		if mb.State == "alive" || mb.State == "suspect" {
			out = append(out, mb.Name)
		}
	}
	return out
}

// TestRejoinAfterForgotten: four members split two and two, each side with company, for
// longer than memberlist keeps a dead member (each side forgets the other); healed, the
// rejoin loop makes the four one membership again. Without it they stay two forever:
// memberlist never contacts a member it forgot, and neither side is alone, which is when
// the join loop tries the seeds again.
func TestRejoinAfterForgotten(t *testing.T) {
	n := newMemNet()
	n.tune = quickGossip
	var ms []*membership
	for i := range 4 {
		ms = append(ms, startMember(t, n, fmt.Sprintf("m%d", i+1), 200*time.Millisecond))
	}
	for _, m := range ms[1:] {
		if _, err := m.ml.Join([]string{ms[0].addr()}); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"m1", "m2", "m3", "m4"}
	waitMembers := func(what string, want map[*membership][]string) {
		t.Helper()
		testenv.WaitFor(t, what, func() bool {
			for m, names := range want {
				if !slices.Equal(m.aliveNames(), names) {
					return false
				}
			}
			return true
		})
	}
	waitMembers("four members", map[*membership][]string{ms[0]: all, ms[1]: all, ms[2]: all, ms[3]: all})

	left, right := []string{"m1", "m2"}, []string{"m3", "m4"}
	n.partition(left, right)
	waitMembers("two sides", map[*membership][]string{ms[0]: left, ms[1]: left, ms[2]: right, ms[3]: right})
	// memberlist gossips to a dead member for GossipToTheDeadTime, then never again;
	// its forgetting has no event to wait on, so the partition lasts that long twice
	// over (the scenario's length, not a wait for something to happen).
	time.Sleep(2 * quickForget)

	n.heal()
	waitMembers("four members again", map[*membership][]string{ms[0]: all, ms[1]: all, ms[2]: all, ms[3]: all})
}
