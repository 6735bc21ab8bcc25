package conf

import "slices"

// Clone returns a deep copy of c: changing the copy, pointer fields included, never
// changes c. Use it to derive a new snapshot from the one a Holder serves.
func (c *Config) Clone() *Config {
	n := *c
	n.Listeners = slices.Clone(c.Listeners)
	for i := range n.Listeners {
		n.Listeners[i].TLS = clonePtr(n.Listeners[i].TLS)
		n.Listeners[i].Auth = n.Listeners[i].Auth.clone()
	}
	n.Memory.ReturnToOS = clonePtr(c.Memory.ReturnToOS)
	n.Auth = *c.Auth.clone()
	n.MQTT.TopicAliasMaximum = clonePtr(c.MQTT.TopicAliasMaximum)
	n.MQTT.MaxQoS = clonePtr(c.MQTT.MaxQoS)
	n.MQTT.RetainAvailable = clonePtr(c.MQTT.RetainAvailable)
	n.Limits.MaxConnections = clonePtr(c.Limits.MaxConnections)
	n.Limits.ConnectRate = clonePtr(c.Limits.ConnectRate)
	n.Limits.MaxSubscriptions = clonePtr(c.Limits.MaxSubscriptions)
	n.Limits.AuthFailures.Max = clonePtr(c.Limits.AuthFailures.Max)
	n.Limits.AuthFailures.ExemptLoopback = clonePtr(c.Limits.AuthFailures.ExemptLoopback)
	n.SysInterval = clonePtr(c.SysInterval)
	n.HTTP.Admin.Users = slices.Clone(c.HTTP.Admin.Users)
	n.HTTP.AllowedHosts = slices.Clone(c.HTTP.AllowedHosts)
	n.Cluster = c.Cluster.clone()
	n.Bridges = slices.Clone(c.Bridges)
	for i := range n.Bridges {
		n.Bridges[i] = n.Bridges[i].clone()
	}
	return &n
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
