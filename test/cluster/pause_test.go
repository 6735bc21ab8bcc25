package cluster

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestPauseRejoin: a follower paused (SIGSTOP) past failure detection is declared dead by
// the others, who keep their leader; resumed (SIGCONT), it is alive again everywhere and
// back in the same cluster.
func TestPauseRejoin(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.start()
	id, leader := c.waitFormed()
	paused, others := c.split(leader, false)
	paused.stop()
	testenv.WaitFor(t, paused.name+" declared dead by the others", func() bool {
		for _, nd := range others {
			s, err := nd.status()
			if err != nil {
				return false
			}
			if m, ok := s.member(paused.name); !ok || m.State != "dead" {
				return false
			}
		}
		return true
	})
	for _, nd := range others {
		if s := nd.mustStatus(); s.Leader != leader || s.ClusterID != id || !s.Formed {
			t.Errorf("%s while %s is paused: leader %q, cluster %q, formed %v", nd.name, paused.name, s.Leader, s.ClusterID, s.Formed)
		}
	}
	if s := c.node(leader).mustStatus(); s.State != "Leader" {
		t.Errorf("the leader %s is %s while a follower is paused", leader, s.State)
	}
	paused.cont()
	if id2, _ := c.waitFormed(); id2 != id {
		t.Errorf("after SIGCONT the cluster is %s; want %s", id2, id)
	}
}
