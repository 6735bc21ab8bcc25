package broker

// SysFigures are the figures of this node's $SYS that a cluster sums over its nodes.
type SysFigures struct {
	ClientsConnected uint64
	ClientsTotal     uint64 // sessions, connected or not
	Subscriptions    uint64
	Received         uint64 // PUBLISH packets received from clients
	Sent             uint64 // PUBLISH packets sent to clients
	Retained         uint64 // retained topics, $SYS included
}

// Figures returns this node's SysFigures now.
func (b *Broker) Figures() SysFigures {
	st := &b.stats
	var f SysFigures
	for q := range 3 {
		f.Received += st.received[q].Load()
		f.Sent += st.sentC[q].Load()
	}
	b.mu.Lock()
	total := len(b.sessions.m)
	b.mu.Unlock()
	connected := b.Clients()
	f.ClientsConnected = uint64(max(connected, 0))
	f.ClientsTotal = uint64(max(total, connected, 0))
	f.Subscriptions = uint64(max(st.subs.Load(), 0))
	f.Retained = uint64(b.retained.tree.Len())
	return f
}
