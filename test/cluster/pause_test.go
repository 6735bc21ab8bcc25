package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
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

// TestPauseLeaderClaim: the Raft leader is paused (SIGSTOP) and a client connects to a
// follower at once. Its claim, forwarded to the paused leader, follows the leadership to
// the one the others elect: the CONNACK is a success, well before mqtt.connect_timeout,
// never 0x88. A lease longer than the default keeps the followers serving through an
// election slowed down by a loaded machine. -rounds repeats the pause (each round pauses
// the leader of the moment).
func TestPauseLeaderClaim(t *testing.T) {
	c, _ := servingCluster(t, func(_ int, k *nodeConfig) {
		k.ClusterYAML = "    lease: 8s\n    claim_timeout: 15s\n"
		k.YAML = "mqtt:\n  connect_timeout: 20s\n"
	})
	for round := range *rounds {
		_, leader := c.waitFormed()
		paused, others := c.split(leader, true)
		cl := mqtttest.DialRaw(t, others[0].mqttAddr())
		paused.stop()
		start := time.Now()
		ack, err := cl.Connect(&packet.Connect{CleanStart: true, ClientID: []byte(fmt.Sprint("while-leader-paused-", round))})
		took := time.Since(start)
		if err != nil || ack.Code != packet.Success {
			t.Fatalf("round %d: CONNECT on %s with the leader %s paused: %v %v after %v; want a success",
				round+1, others[0].name, paused.name, connackCode(ack), err, took.Round(time.Millisecond))
		}
		t.Logf("round %d: CONNACK on %s %v after the leader %s was paused", round+1, others[0].name, took.Round(time.Millisecond), paused.name)
		paused.cont()
	}
}

// connackCode is a CONNACK's reason code for a message; "none" without one.
func connackCode(ack *packet.Connack) string {
	if ack == nil {
		return "none"
	}
	return fmt.Sprintf("%#x", byte(ack.Code))
}
