package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// Partitions on the in-memory network (memNet): the cluster's own behaviour when links
// are cut and healed, its nodes in one process. test/cluster runs the same scenarios with
// processes in network namespaces, and MQTT clients on each side.

// nodeNames returns the names of nodes.
func nodeNames(nodes []*testNode) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.name
	}
	return out
}

// seesDead reports whether every node of observers has every node of targets as failed.
func seesDead(observers, targets []*testNode) bool {
	for _, o := range observers {
		for _, nd := range targets {
			if !slices.ContainsFunc(o.Members(), func(m Member) bool { return m.Name == nd.name && m.State == "dead" }) {
				return false
			}
		}
	}
	return true
}

// serving reports whether every node of nodes serves clients.
func serving(nodes []*testNode) bool {
	for _, n := range nodes {
		if ok, _ := n.Serving(); !ok {
			return false
		}
	}
	return true
}

// checkWhole waits until nodes are one cluster: each sees all of them alive and follows
// one leader, and each has them all as voters, in one term; then until each serves.
func checkWhole(t *testing.T, nodes []*testNode) {
	t.Helper()
	all := nodeNames(nodes)
	slices.Sort(all)
	var voters []string
	for _, name := range all {
		voters = append(voters, name+"=voter")
	}
	want := strings.Join(voters, " ")
	var last string
	testenv.WaitFor(t, "one cluster of all the nodes, alive, voters, one leader, one term", func() bool {
		var views []string
		leader, _ := nodes[0].Leader()
		term := nodes[0].raft.CurrentTerm()
		ok := leader != ""
		for _, n := range nodes {
			var alive []string
			for _, m := range n.Members() {
				if m.State == "alive" {
					alive = append(alive, m.Name)
				}
			}
			l, _ := n.Leader()
			conf := configuration(n)
			views = append(views, fmt.Sprintf("%s: alive %v, leader %s, term %d, %s", n.name, alive, l, n.raft.CurrentTerm(), conf))
			ok = ok && slices.Equal(alive, all) && l == leader && n.raft.CurrentTerm() == term && conf == want
		}
		last = strings.Join(views, "\n")
		return ok
	})
	t.Logf("whole:\n%s", last)
	testenv.WaitFor(t, "every node serving", func() bool { return serving(nodes) })
}

// claimAgain claims cid on n until a claim does not fail, for testenv.Timeout, and
// returns the last outcome. A claim fails when its node fences itself meanwhile: an
// election that outlasts the fence (0.8 of the lease) fences the majority too, for that
// moment (docs/cluster-owner.md, Self-fencing).
func claimAgain(n *testNode, cid string) claimOutcome {
	deadline := time.Now().Add(testenv.Timeout)
	for {
		ch := make(chan claimOutcome, 1)
		n.Claim(broker.Claimant{ClientID: cid, Identity: "2:l1" + cid}, func(o broker.ClaimResult) {
			ch <- claimOutcome{o.Epoch, o.Moved, string(o.Session), o.Err}
		})
		o := <-ch
		if o.err == nil || time.Now().After(deadline) {
			return o
		}
		time.Sleep(100 * time.Millisecond) // a fence lasts until contact is back: a claim a tick later
	}
}

// TestPartitionLeader: three nodes, the leader cut off from the other two. The majority
// elects a leader of its own in a later term and commits past everything the old leader
// had appended when the cut came; the old leader steps down, commits nothing more and
// knows no leader; the majority sees it dead. Once its lease has run out the old leader
// has fenced itself (its host told to close every client), and a client id it owned is
// claimed on the majority: the claim waits out the lease and moves the id without its
// session, which is out of reach. Healed, the three are one cluster of one term again,
// every node serving, every node with the same owners, and the old leader has fenced the
// id claimed away from it. test/cluster TestPartitionLeader is the same with processes,
// and MQTT clients on both sides.
func TestPartitionLeader(t *testing.T) {
	lab := newMemNet()
	nodes, hosts := threeWithHostsOn(t, lab)
	id, leader := waitFormed(t, nodes...)
	var old *testNode
	var oldHost *fakeHost
	var majority []*testNode
	for i, n := range nodes {
		if n.name == leader {
			old, oldHost = n, hosts[i]
		} else {
			majority = append(majority, n)
		}
	}
	moves := claimWait(t, old, "moves")
	stays := claimWait(t, majority[0], "stays")
	term := old.raft.CurrentTerm()

	lab.partition(nodeNames(majority), []string{old.name})
	cut := time.Now()
	before := old.raft.LastIndex() // read after the cut: what it committed as the cut came is before it
	testenv.WaitFor(t, "the majority to follow a leader of its own in a later term", func() bool {
		l0, _ := majority[0].Leader()
		l1, _ := majority[1].Leader()
		return l0 != "" && l0 == l1 && l0 != old.name &&
			majority[0].raft.CurrentTerm() > term && majority[1].raft.CurrentTerm() > term
	})
	t.Logf("the majority has a new leader %v after the cut", time.Since(cut).Round(time.Millisecond))
	testenv.WaitFor(t, old.name+" to step down and know no leader", func() bool {
		_, known := old.Leader()
		return !old.IsLeader() && !known
	})
	// The claim waits out the lease: the owner cannot be asked for the session.
	moved := make(chan claimOutcome, 1)
	go func() { moved <- claimAgain(majority[1], "moves") }()
	if o := claimAgain(majority[0], "past"); o.err != nil { // an entry of the majority's own
		t.Fatalf("a claim on %s, in the majority: %v", majority[0].name, o.err)
	}
	last := old.raft.LastIndex()
	testenv.WaitFor(t, fmt.Sprintf("the majority to commit past %s's last index %d", old.name, last), func() bool {
		return majority[0].raft.CommitIndex() > last && majority[1].raft.CommitIndex() > last
	})
	if c := old.raft.CommitIndex(); c > before {
		t.Errorf("%s alone committed up to %d, past its last index %d when the cut came", old.name, c, before)
	}
	testenv.WaitFor(t, old.name+" to fence itself", func() bool {
		_, _, self := oldHost.snapshot()
		ok, _ := old.Serving()
		return self > 0 && !ok
	})
	testenv.WaitFor(t, "the majority to serve", func() bool { return serving(majority) })
	o := <-moved
	if o.err != nil || !o.moved || o.session != "" || o.epoch <= moves.epoch {
		t.Errorf("moves claimed on %s, its owner %s cut off: %+v; want moved, no session, an epoch past %d", majority[1].name, old.name, o, moves.epoch)
	}
	testenv.WaitFor(t, "the majority to see "+old.name+" dead", func() bool { return seesDead(majority, []*testNode{old}) })

	lab.heal()
	healed := time.Now()
	if id2, _ := waitFormed(t, nodes...); id2 != id {
		t.Errorf("healed, the cluster is %s; want %s", id2, id)
	}
	checkWhole(t, nodes)
	t.Logf("one cluster again %v after the heal", time.Since(healed).Round(time.Millisecond))
	testenv.WaitFor(t, "every node to have moves on "+majority[1].name+" and stays on "+majority[0].name, func() bool {
		for _, n := range nodes {
			if name, e := n.Owner("moves"); name != majority[1].name || e != o.epoch {
				return false
			}
			if name, e := n.Owner("stays"); name != majority[0].name || e != stays.epoch {
				return false
			}
		}
		return true
	})
	testenv.WaitFor(t, old.name+" to fence moves, claimed away from it", func() bool {
		fenced, _, _ := oldHost.snapshot()
		return slices.Contains(fenced, fmt.Sprintf("moves@%d", o.epoch))
	})
}

// TestPartitionOneWay: a follower that stops hearing anything from the others (they
// still get its gossip; its stream connections fail both ways) loses the leader and
// stands for election again and again. The others, in contact with their leader, keep
// it, in the same term: since the deaf node only pre-votes, its term does not grow, so
// healed it follows the same leader in the same term instead of deposing it with a higher
// one. test/cluster TestPartitionOneWay is the same with processes.
func TestPartitionOneWay(t *testing.T) {
	lab := newMemNet()
	nodes, _ := threeWithHostsOn(t, lab)
	id, leader := waitFormed(t, nodes...)
	var deaf *testNode
	var others []*testNode
	for _, n := range nodes {
		if n.name != leader && deaf == nil {
			deaf = n
		} else {
			others = append(others, n)
		}
	}
	term := deaf.raft.CurrentTerm()
	lab.cut(nodeNames(others), []string{deaf.name})
	testenv.WaitFor(t, deaf.name+" to lose the leader", func() bool {
		_, known := deaf.Leader()
		return !known && !deaf.IsLeader()
	})
	const campaign = "entering candidate state"
	tries := strings.Count(deaf.logs.String(), campaign)
	testenv.WaitFor(t, deaf.name+" to stand for election three times", func() bool {
		return strings.Count(deaf.logs.String(), campaign) >= tries+3
	})
	for _, n := range others {
		if l, _ := n.Leader(); l != leader || n.raft.CurrentTerm() != term {
			t.Errorf("while %s is deaf, %s follows %s in term %d; want %s in term %d", deaf.name, n.name, l, n.raft.CurrentTerm(), leader, term)
		}
	}
	lab.heal()
	if id2, leader2 := waitFormed(t, nodes...); id2 != id || leader2 != leader {
		t.Errorf("healed: cluster %s led by %s; want %s led by %s", id2, leader2, id, leader)
	}
	checkWhole(t, nodes)
	if got := deaf.raft.CurrentTerm(); got != term {
		t.Errorf("healed, %s is in term %d; want %d", deaf.name, got, term)
	}
}
