package cluster

import (
	"slices"
	"testing"
)

// TestFormJoin: three nodes with bootstrap_expect 3 form one cluster (one leader, the
// same cluster id everywhere, three voters); a node with bootstrap_expect 3 that sees no
// other never forms a cluster of its own, though it started first and had longer than
// the three took; a fourth node that starts late joins the cluster.
func TestFormJoin(t *testing.T) {
	c := newCluster(t, 3, nil)
	lonely := newNode(t, "lonely", nodeConfig{BootstrapExpect: 3})
	lonely.start()
	c.start()
	id, leader := c.waitFormed()
	if id == "" || leader == "" {
		t.Fatalf("formed with id %q, leader %q", id, leader)
	}
	for _, nd := range c.nodes {
		s := nd.mustStatus()
		for _, m := range s.Members {
			if m.Raft != "voter" || m.ClusterID != id {
				t.Errorf("%s sees %s as %q of cluster %q; want a voter of %s", nd.name, m.Name, m.Raft, m.ClusterID, id)
			}
			if want := c.node(m.Name).mqttAddr(); m.MQTT != want {
				t.Errorf("%s sees %s's MQTT address as %q; want %s", nd.name, m.Name, m.MQTT, want)
			}
		}
	}

	s := lonely.mustStatus()
	if s.Formed || s.ClusterID != "" || s.Leader != "" || s.Term != 0 || s.LastIndex != 0 {
		t.Errorf("a lone node with bootstrap_expect 3 formed a cluster: %+v", s)
	}

	late := c.add("n4", nodeConfig{BootstrapExpect: 3, Seeds: c.nodes[0].cfg.Seeds})
	late.start()
	if id4, _ := c.waitFormed(); id4 != id {
		t.Errorf("the late node's cluster id %s; want %s", id4, id)
	}
	for _, nd := range c.nodes {
		got := nd.mustStatus()
		var voters []string
		for _, m := range got.Members {
			if m.Raft == "voter" {
				voters = append(voters, m.Name)
			}
		}
		if want := []string{"n1", "n2", "n3", "n4"}; !slices.Equal(voters, want) {
			t.Errorf("%s: voters %v; want %v", nd.name, voters, want)
		}
	}
	if s := lonely.mustStatus(); s.Formed || s.ClusterID != "" || len(s.Members) != 1 {
		t.Errorf("the lone node joined something: %+v", s)
	}
}
