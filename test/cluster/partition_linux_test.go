package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestPartitionLeader: three nodes, the leader C cut off from A and B ({A,B} | {C}),
// while a client on C keeps its log busy (retained changes): C commits nothing past what
// it had appended when the cut came. The majority elects a new leader of a later term,
// commits past everything C has and serves clients, its connected client throughout;
// C steps down within its leader lease and knows no leader; A and B see C dead. Once
// C's lease has run out it has closed its client (DISCONNECT 0x9C) and refuses CONNECTs
// (v5 0x88 or 0x9C, 3.1.1 3); that client's id reconnects to the majority (after the
// lease, its old owner unreachable).
// Healed, the three are one cluster again: one leader, one cluster id, three voters of
// one term, every node's /load shows all three alive, every node serves clients, and the
// moved client id is live once, where it moved. -rounds repeats the cut and the heal,
// each time with the leader of the moment. internal/cluster TestPartitionLeader is the
// cluster's side of it in one process, on an in-memory network.
func TestPartitionLeader(t *testing.T) {
	lab, c, id, leader := formedLab(t, 3)
	for round := range *rounds {
		if *rounds > 1 {
			t.Logf("round %d of %d", round+1, *rounds)
		}
		leader = partitionLeader(t, c, lab, id, leader)
	}
}

// partitionLeader cuts the leader off, checks both sides, heals and checks the whole;
// it returns the leader after the heal.
func partitionLeader(t *testing.T, c *testCluster, lab *netLab, id, leader string) string {
	t.Helper()
	old := c.node(leader)
	var majority []*node
	for _, nd := range c.nodes {
		if nd != old {
			majority = append(majority, nd)
		}
	}
	stay := dialLab(t, majority[0])
	if ack, err := stay.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("stays-" + leader)}); err != nil || ack.Code != packet.Success {
		t.Fatalf("a client on %s: %v %v", majority[0].name, ack, err)
	}
	moves := dialLab(t, old)
	movesID := []byte("moves-" + leader)
	if ack, err := moves.Connect(&packet.Connect{CleanStart: true, ClientID: movesID}); err != nil || ack.Code != packet.Success {
		t.Fatalf("a client on %s: %v %v", old.name, ack, err)
	}

	// The log is busy across the cut: entries commit up to its moment, and the leader
	// appends more that it must not commit alone.
	stopChurn := churnRetained(t, old)
	lab.partition(majority, []*node{old})
	cut := time.Now()
	// Read after the cut: an entry the leader committed as the cut came is before it.
	before := old.mustStatus()
	id2, leader2 := c.waitFormed(majority...)
	elected := time.Since(cut)
	t.Logf("the majority has a new leader %v after the cut", elected.Round(time.Millisecond))
	// A follower serves until 0.8 of the lease after its last contact with a leader,
	// which came at most a tenth of a heartbeat timeout before the cut: an election that
	// outlasts that fences the majority too, for that moment (docs/cluster-owner.md,
	// Self-fencing). hashicorp/raft's pre-vote can take that long: a follower that still
	// believes in the old leader refuses a candidate until its own heartbeat timeout
	// (1 to 3 s after the last contact), and each refused round costs an election
	// timeout (1 to 2 s).
	majorityFenced := elected >= time.Duration(conf.DefaultClusterLease)*8/10-200*time.Millisecond
	if id2 != id || leader2 == leader {
		t.Fatalf("the majority formed cluster %s led by %s; want cluster %s led by one of its own", id2, leader2, id)
	}
	testenv.WaitFor(t, old.name+" steps down and knows no leader", func() bool {
		s, err := old.status()
		return err == nil && s.State != "Leader" && s.Leader == ""
	})
	stopChurn()
	testenv.WaitFor(t, "the majority sees "+old.name+" dead", func() bool {
		for _, nd := range majority {
			s, err := nd.status()
			if m, ok := s.member(old.name); err != nil || !ok || m.State != "dead" {
				return false
			}
		}
		return true
	})
	minority := old.mustStatus()
	past := 0
	testenv.WaitFor(t, fmt.Sprintf("the majority in a term after %d, committing past the minority's last index %d", before.Term, minority.LastIndex), func() bool {
		for _, nd := range majority {
			s, err := nd.status()
			if err != nil || s.Term <= before.Term || s.CommitIndex <= minority.LastIndex {
				// Entries of its own to commit: a claim and a release per client.
				past++
				if _, conn, err := majority[0].connect(fmt.Sprintf("past-%s-%d", leader, past), packet.V5); err == nil {
					_ = conn.Close()
				}
				return false
			}
		}
		return true
	})
	if minority.CommitIndex > before.LastIndex {
		t.Errorf("%s alone committed up to %d, past its last index %d before the partition", old.name, minority.CommitIndex, before.LastIndex)
	}
	for _, nd := range majority {
		mustServe(t, nd, "partitioned")
	}
	// The minority fences itself once its lease has run out.
	p, err := moves.Read(testenv.Timeout)
	if d, ok := p.(*packet.Disconnect); err != nil || !ok || d.Code != packet.UseAnotherServer {
		t.Errorf("the client on the minority %s got %v (%v); want DISCONNECT 0x9C once its lease ran out", old.name, p, err)
	}
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		ack, conn, err := old.connect("refused-"+leader, v)
		if err == nil {
			_ = conn.Close()
		}
		if err != nil || ack.Code != packet.ServerUnavailable && ack.Code != packet.UseAnotherServer {
			t.Errorf("partitioned, the minority %s answers a CONNECT (%v) with %v (%v); want it refused", old.name, v, ack.Code, err)
		}
	}
	if majorityFenced {
		// The documented moment of a long election: the majority's client was told to
		// go (DISCONNECT 0x9C), and a client connecting now is served.
		t.Logf("the election outlasted the majority's fence: its client is disconnected and connects again")
		p, err := stay.Read(testenv.Timeout)
		if d, ok := p.(*packet.Disconnect); err != nil || !ok || d.Code != packet.UseAnotherServer {
			t.Errorf("the client on %s in the majority, fenced by a long election, got %v (%v); want DISCONNECT 0x9C", majority[0].name, p, err)
		}
		stay = dialLab(t, majority[0])
		if ack, err := stay.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("stays-" + leader)}); err != nil || ack.Code != packet.Success {
			t.Fatalf("the client on %s in the majority, connecting again: %v %v", majority[0].name, ack, err)
		}
	} else if err := ping(stay); err != nil {
		t.Errorf("the client on %s in the majority: %v; want it served throughout", majority[0].name, err)
	}
	moved := dialLab(t, majority[1])
	if ack, err := moved.Connect(&packet.Connect{CleanStart: true, ClientID: movesID}); err != nil || ack.Code != packet.Success {
		t.Errorf("%s moving to %s: %v %v; want it served", movesID, majority[1].name, ack, err)
	}

	leader3 := heal(t, lab, c, id)
	for _, cl := range []*mqtttest.Raw{stay, moved} {
		if err := ping(cl); err != nil {
			t.Errorf("healed, a client of the majority: %v; want it still served", err)
		}
	}
	return leader3
}

// churnRetained keeps nd's Raft log busy until stop is called: a client on nd sets a
// retained message again and again at QoS 1, each once the previous one's PUBACK came
// (at most 20,000): while nd leads, one entry after another is appended and committed.
func churnRetained(t *testing.T, nd *node) (stop func()) {
	t.Helper()
	c := dialLab(t, nd)
	if ack, err := c.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("churn-" + nd.name)}); err != nil || ack.Code != packet.Success {
		t.Fatalf("a client on %s: %v %v", nd.name, ack, err)
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for i := range 20000 {
			select {
			case <-done:
				return
			default:
			}
			id := uint16(i%65535 + 1)
			if c.Send(&packet.Publish{Topic: []byte("churn/" + nd.name), Payload: fmt.Appendf(nil, "%d", i), QoS: 1, Retain: true, PacketID: id}) != nil {
				return
			}
			if _, err := c.Read(testenv.Timeout); err != nil { // the PUBACK; none once nd is cut off
				return
			}
		}
	}()
	return func() {
		close(done)
		_ = c.Conn.Close() // ends a read waiting for a PUBACK that will not come
		<-finished
	}
}

// formedLab starts a cluster of n processes on a netLab, and waits until it formed.
func formedLab(t *testing.T, n int) (lab *netLab, c *testCluster, id, leader string) {
	lab = newNetLab(t)
	c = newNetCluster(t, lab, n, nil)
	c.start()
	id, leader = c.waitFormed()
	return lab, c, id, leader
}

// dialLab opens a raw MQTT 5 connection to nd through the lab.
func dialLab(t testing.TB, nd *node) *mqtttest.Raw {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := nd.dialer()(ctx, "tcp", nd.mqttAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return mqtttest.NewRaw(conn)
}

// ping checks that c's connection is served: a PINGREQ answered with PINGRESP.
func ping(c *mqtttest.Raw) error {
	if err := c.Send(&packet.Pingreq{}); err != nil {
		return err
	}
	p, err := c.Read(testenv.Timeout)
	if err != nil {
		return err
	}
	if _, ok := p.(*packet.Pingresp); !ok {
		return fmt.Errorf("%v, not PINGRESP", p.Type())
	}
	return nil
}

// TestPartitionOneWay: a follower A that stops hearing anything from the others (they
// still hear it: a one-way cut, so its TCP connections fail both ways and its gossip
// probes go out) loses the leader and stands for election again and again. The others,
// in contact with their leader, refuse it; and since it only pre-votes, its term does
// not grow, so healed it follows the same leader in the same term instead of deposing
// it with a higher one (with pre-vote disabled the leader changes at the heal).
// internal/cluster TestPartitionOneWay is the same in one process.
func TestPartitionOneWay(t *testing.T) {
	lab, c, id, leader := formedLab(t, 3)
	deaf, others := c.split(leader, false)
	term := c.node(leader).mustStatus().Term
	for _, nd := range others {
		lab.cut(nd, deaf)
	}
	testenv.WaitFor(t, deaf.name+" loses the leader", func() bool {
		s, err := deaf.status()
		return err == nil && s.Leader == "" && s.State != "Leader"
	})
	// The deaf node stands for election again and again meanwhile (its requests reach
	// the others): the leader must not step down for it.
	const campaign = "entering candidate state"
	tries := strings.Count(deaf.logs(), campaign)
	testenv.WaitFor(t, deaf.name+" stands for election three times", func() bool {
		return strings.Count(deaf.logs(), campaign) >= tries+3
	})
	for _, nd := range others {
		if s := nd.mustStatus(); s.Leader != leader || s.Term != term {
			t.Errorf("while %s is deaf, %s follows %s in term %d; want %s in term %d", deaf.name, nd.name, s.Leader, s.Term, leader, term)
		}
	}
	lab.heal()
	if id2, leader2 := c.waitFormed(); id2 != id || leader2 != leader {
		t.Errorf("healed: cluster %s led by %s; want %s led by %s", id2, leader2, id, leader)
	}
	checkWhole(t, c)
	if s := deaf.mustStatus(); s.Term != term {
		t.Errorf("healed, %s is in term %d; want %d", deaf.name, s.Term, term)
	}
}

// TestPartitionPastForgetting (-long): four nodes split two and two, neither side alone
// and neither a majority (so no node serves clients), for longer than memberlist gossips
// to a dead member (30s): each side forgets the other. Healed, they find each other
// again (a node joins the members it knows failed every 10s: internal/cluster
// rejoin.go), are one cluster and serve clients.
func TestPartitionPastForgetting(t *testing.T) {
	if !*long {
		t.Skip("a minute long: run with -long (bench/faults.sh); internal/cluster TestRejoinAfterForgotten checks the rejoin in CI")
	}
	lab, c, id, _ := formedLab(t, 4)
	left, right := c.nodes[:2], c.nodes[2:]
	lab.partition(left, right)
	testenv.WaitFor(t, "each side sees the other dead", func() bool {
		for _, side := range [][]*node{left, right} {
			for _, nd := range side {
				s, err := nd.status()
				if err != nil {
					return false
				}
				for _, m := range s.Members {
					if other := !slices.ContainsFunc(side, func(n *node) bool { return n.name == m.Name }); other && m.State != "dead" {
						return false
					}
				}
			}
		}
		return true
	})
	for _, nd := range c.nodes {
		ack, conn, err := nd.connect("refused-"+nd.name, packet.V5)
		if err == nil {
			_ = conn.Close()
		}
		if err != nil || ack.Code != packet.ServerUnavailable && ack.Code != packet.UseAnotherServer {
			t.Errorf("split two and two, %s answers a CONNECT with %v (%v); want it refused", nd.name, ack.Code, err)
		}
	}
	// memberlist gossips to a dead member for GossipToTheDeadTime (30s in its LAN
	// configuration), then forgets it; the partition lasts past that (the scenario's
	// length: the forgetting has no event to wait on).
	time.Sleep(35 * time.Second)
	heal(t, lab, c, id)
}

// heal ends lab's faults and checks that c is whole again: one cluster, the one of id,
// every node a voter and serving. It returns the leader.
func heal(t *testing.T, lab *netLab, c *testCluster, id string) (leader string) {
	t.Helper()
	lab.heal()
	healed := time.Now()
	id2, leader := c.waitFormed()
	t.Logf("one cluster again %v after the heal", time.Since(healed).Round(time.Millisecond))
	if id2 != id {
		t.Errorf("healed, the cluster is %s; want %s", id2, id)
	}
	checkWhole(t, c)
	for _, nd := range c.nodes {
		mustServe(t, nd, "healed")
	}
	return leader
}

// checkWhole checks that every node of c sees every node a voter of one cluster in one
// term, and that every node's /load shows them all alive with one leader; c is formed.
func checkWhole(t *testing.T, c *testCluster) {
	t.Helper()
	var names []string
	for _, nd := range c.nodes {
		names = append(names, nd.name)
	}
	testenv.WaitFor(t, "every node's /load shows every node alive and one leader", func() bool {
		for _, nd := range c.nodes {
			r, err := nd.load()
			if err != nil {
				return false
			}
			var alive, leaders []string
			for _, n := range r.Nodes {
				if n.State == "alive" {
					alive = append(alive, n.Name)
				}
				if n.Leader {
					leaders = append(leaders, n.Name)
				}
			}
			slices.Sort(alive)
			if !slices.Equal(alive, names) || len(leaders) != 1 {
				return false
			}
		}
		return true
	})
	var term uint64
	var views []string
	for _, nd := range c.nodes {
		s := nd.mustStatus()
		views = append(views, fmt.Sprintf("%s: term %d %+v", nd.name, s.Term, s.Members))
		if term == 0 {
			term = s.Term
		}
		var voters []string
		for _, m := range s.Members {
			if m.Raft == "voter" {
				voters = append(voters, m.Name)
			}
		}
		if !slices.Equal(voters, names) || s.Term != term {
			t.Errorf("not one cluster of voters %v in one term:\n%s", names, strings.Join(views, "\n"))
			return
		}
	}
}

// mustServe checks that nd accepts an MQTT 5 client, reached from the lab's hub, within
// testenv.Timeout (a node that was cut off serves again once it has caught up).
func mustServe(t *testing.T, nd *node, when string) {
	t.Helper()
	var last string
	ok := waitUntil(func() bool {
		ack, conn, err := nd.connect("probe-"+nd.name, packet.V5)
		if err == nil {
			_ = conn.Close()
		}
		last = fmt.Sprintf("%v (%v)", ack.Code, err)
		return err == nil && ack.Code == packet.Success
	})
	if !ok {
		t.Errorf("%s, %s answers a CONNECT with %s; want it served", when, nd.name, last)
	}
}

// waitUntil polls cond as testenv.WaitFor does, and reports whether it held in time.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(testenv.Timeout)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}

// TestPartitionStop: a follower cut off from the others, once it knows no leader and
// sees them dead (so it is alone, and tries its seeds again and again), stops gracefully
// (SIGTERM) with nobody to take it out of Raft's configuration: it exits 0 within its
// leave bounds, held up by no dial to the other side (Raft's votes, the seeds); and
// restarted on its data directory while still cut off, it is a member of the cluster
// again once healed.
func TestPartitionStop(t *testing.T) {
	lab, c, id, leader := formedLab(t, 3)
	cut, others := c.split(leader, false)
	lab.partition(others, []*node{cut})
	const retry = "no seed answered yet"
	tries := strings.Count(cut.logs(), retry)
	testenv.WaitFor(t, cut.name+" knows no leader, sees the others dead and has tried its seeds", func() bool {
		s, err := cut.status()
		return err == nil && s.Leader == "" && len(s.alive()) == 1 && strings.Count(cut.logs(), retry) > tries
	})
	stop := time.Now()
	cut.term() // fails the test unless it exits 0 within startTimeout
	took := time.Since(stop)
	t.Logf("%s stopped in %v", cut.name, took.Round(time.Millisecond))
	if budget := 10 * time.Second; took > budget {
		t.Errorf("%s took %v to stop, cut off; want at most %v (its wait for a leader to remove it, 5s, and the leave broadcast, 1s)", cut.name, took, budget)
	}
	cut.start()
	lab.heal()
	if id2, _ := c.waitFormed(); id2 != id {
		t.Errorf("healed, the cluster is %s; want %s", id2, id)
	}
	checkWhole(t, c)
}
