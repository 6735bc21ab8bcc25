package cluster

import (
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// Load and redirection. Every node advertises its load figure (metrics.Load: the most
// used of connections and memory, 0 to 1) in its gossip metadata; the control goroutine
// samples it every controlTick and broadcasts it when it moved by loadStep or more. A
// node whose own figure is above cluster.redirect_load answers new MQTT 5 clients with
// 0x9C (Use another server) and a Server Reference to the least loaded live member whose
// figure is below the threshold (broker.Redirector); when every member is as loaded, it
// serves them itself. The choice is made on the control goroutine, so a CONNECT only
// reads it.

// refreshRedirect chooses where new clients go, given this node's load figure own.
func (c *Cluster) refreshRedirect(own float64) {
	to := ""
	if own > c.cfg.RedirectLoad {
		best := c.cfg.RedirectLoad
		ours := c.ClusterID()
		for _, m := range c.ms.members() {
			if m.Name == c.cfg.NodeName || m.State != "alive" || m.MetaErr != nil || m.Meta.Leaving ||
				m.Meta.MQTT == "" || ours != "" && m.Meta.ClusterID != ours {
				continue
			}
			if m.Meta.Load < best {
				best, to = m.Meta.Load, m.Meta.MQTT
			}
		}
	}
	if old := *c.redirectTo.Load(); old != to {
		c.redirectTo.Store(&to)
		if to == "" {
			c.log.Info("cluster: serving new MQTT 5 clients here again", "load", own, "threshold", c.cfg.RedirectLoad)
		} else {
			c.log.Info("cluster: redirecting new MQTT 5 clients", "load", own, "threshold", c.cfg.RedirectLoad, "to", to)
		}
	}
}

// Redirect returns the MQTT address of the node a new MQTT 5 client should use instead
// of this one, or "" to serve it here (broker.Redirector).
func (c *Cluster) Redirect() string { return *c.redirectTo.Load() }

// Nodes returns every node this one knows for GET /load: alive, suspect, leaving, dead
// or left, with its load figure as it last told the others (this node's own: now).
func (c *Cluster) Nodes() []metrics.NodeLoad {
	leader, _ := c.Leader()
	var out []metrics.NodeLoad
	for _, m := range c.Members() {
		n := metrics.NodeLoad{Name: m.Name, State: m.State, Leader: m.Name == leader, Self: m.Name == c.cfg.NodeName,
			RPC: m.Meta.RPC, MQTT: m.Meta.MQTT, Load: m.Meta.Load}
		if n.State == "alive" && m.Meta.Leaving {
			n.State = "leaving"
		}
		if n.Self {
			n.Load = c.load()
		}
		out = append(out, n)
	}
	return out
}
