package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestPartitionLeader: three nodes, the leader C cut off from A and B ({A,B} | {C}).
// The majority elects a new leader of a later term and commits past everything C has;
// C steps down within its leader lease and knows no leader; A and B see C dead. Healed,
// the three are one cluster again: one leader, one cluster id, three voters of one term,
// and every node's /load shows all three alive.
func TestPartitionLeader(t *testing.T) {
	lab := newNetLab(t)
	c := newNetCluster(t, lab, 3, nil)
	c.start()
	id, leader := c.waitFormed()
	old := c.node(leader)
	var majority []*node
	for _, nd := range c.nodes {
		if nd != old {
			majority = append(majority, nd)
		}
	}
	before := old.mustStatus()

	lab.partition(majority, []*node{old})
	id2, leader2 := c.waitFormed(majority...)
	if id2 != id || leader2 == leader {
		t.Fatalf("the majority formed cluster %s led by %s; want cluster %s led by one of its own", id2, leader2, id)
	}
	testenv.WaitFor(t, old.name+" steps down and knows no leader", func() bool {
		s, err := old.status()
		return err == nil && s.State != "Leader" && s.Leader == ""
	})
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
	for _, nd := range majority {
		s := nd.mustStatus()
		if s.Term <= before.Term || s.CommitIndex <= minority.LastIndex {
			t.Errorf("%s in the majority: term %d, commit index %d; want a term after %d and a commit index past the minority's last index %d",
				nd.name, s.Term, s.CommitIndex, before.Term, minority.LastIndex)
		}
	}
	if minority.CommitIndex > before.LastIndex {
		t.Errorf("%s alone committed up to %d, past its last index %d before the partition", old.name, minority.CommitIndex, before.LastIndex)
	}
	for _, nd := range majority {
		mustServe(t, nd, "partitioned")
	}

	lab.heal()
	if id3, _ := c.waitFormed(); id3 != id {
		t.Errorf("healed, the cluster is %s; want %s", id3, id)
	}
	checkWhole(t, c)
	for _, nd := range c.nodes {
		mustServe(t, nd, "healed")
	}
}

// mustServe checks that nd accepts an MQTT 5 client, reached from the lab's hub.
func mustServe(t *testing.T, nd *node, when string) {
	t.Helper()
	ack, conn, err := nd.connect("probe-"+nd.name, packet.V5)
	if err != nil || ack.Code != packet.Success {
		t.Errorf("%s, %s answers a CONNECT with %v (%v); want it served", when, nd.name, ack.Code, err)
		return
	}
	_ = conn.Close()
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
