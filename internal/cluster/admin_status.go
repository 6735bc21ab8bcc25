package cluster

import (
	"sort"

	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

// Status returns this node's view of the cluster, which GET /cluster serves as JSON.
func (c *Cluster) Status() clusterlink.Status {
	s := clusterlink.Status{Node: c.cfg.NodeName, ClusterID: c.ClusterID(), Members: []clusterlink.MemberStatus{}}
	if c.raft == nil {
		return s
	}
	s.State = c.raft.State().String()
	s.Leader, _ = c.Leader()
	s.Formed = c.isFormed()
	s.Term, s.LastIndex, s.CommitIndex = c.raft.CurrentTerm(), c.raft.LastIndex(), c.raft.CommitIndex()
	s.Auth.InForce = c.authDigest()
	s.Auth.Replicated, s.Auth.Index = c.replicatedAuthDigest()
	suffrage := c.suffrage()
	for _, m := range c.Members() {
		state := m.State
		if state == "alive" && m.Meta.Leaving {
			state = "leaving"
		}
		s.Members = append(s.Members, clusterlink.MemberStatus{Name: m.Name, State: state, Raft: suffrage[m.Name], Gossip: m.Addr,
			RPC: m.Meta.RPC, MQTT: m.Meta.MQTT, ClusterID: m.Meta.ClusterID, Load: m.Meta.Load,
			AuthDigest: m.Meta.AuthDigest})
		delete(suffrage, m.Name)
	}
	for name, role := range suffrage {
		s.Members = append(s.Members, clusterlink.MemberStatus{Name: name, State: "unknown", Raft: role})
	}
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
	return s
}
