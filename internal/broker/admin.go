package broker

import (
	"slices"
	"strings"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// What the admin API (internal/admin) reads of the broker. A listing walks the table of
// SubscriberIDs (Broker.ids: every session, online or not, by a small integer) a page at a
// time under its read lock, which the publish path shares and only a session's creation
// or end waits for: no copy of the table, and no pause of the pollers however many
// clients there are. The cursor is the next ID to look at; a session made or ended
// during a listing may or may not appear, as with any live listing.

// maxScan bounds the IDs one page looks at under the lock, matching or not, so that a
// filter that matches nothing cannot hold the lock for a million IDs; the page then
// comes back short, with the cursor where it stopped.
const maxScan = 16384

// A SessionFilter selects sessions; its zero value selects all of them.
type SessionFilter struct {
	Online     bool   // connected ones only
	Prefix     string // client id prefix
	Username   string // exact
	Listener   string // exact, by name; only connected sessions have one
	Persistent bool   // sessions that outlive their connection only
}

// SessionInfo is what a listing shows of a session.
type SessionInfo struct {
	ClientID   string `json:"client_id"`
	Username   string `json:"username,omitempty"`
	Online     bool   `json:"connected"`
	Persistent bool   `json:"persistent"`
	Protocol   string `json:"protocol"`
	// Of a connected session only.
	Listener       string    `json:"listener,omitempty"`
	Address        string    `json:"address,omitempty"`
	KeepAlive      uint16    `json:"keep_alive,omitempty"`
	ConnectedSince time.Time `json:"connected_since,omitzero"`
	Inflight       int       `json:"inflight"`
	Queued         int       `json:"queued"`
	ExpiryInterval uint32    `json:"expiry_interval"`
	// Of one session's detail only (Session).
	Subscriptions []SubscriptionInfo `json:"subscriptions,omitempty"`
}

// SubscriptionInfo is one subscription of a session.
type SubscriptionInfo struct {
	Filter            string `json:"filter"`
	QoS               uint8  `json:"qos"`
	NoLocal           bool   `json:"no_local,omitempty"`
	RetainAsPublished bool   `json:"retain_as_published,omitempty"`
	RetainHandling    uint8  `json:"retain_handling,omitempty"`
	ID                uint32 `json:"subscription_id,omitempty"`
}

// Sessions returns up to limit sessions that f selects, from ID cursor on, and the cursor
// of the next page (0: the end).
func (b *Broker) Sessions(cursor uint32, limit int, f SessionFilter) (page []SessionInfo, next uint32) {
	b.ids.mu.RLock() // before a session's lock (broker.go's lock order), which info takes
	end := uint32(len(b.ids.targets))
	id := max(cursor, 1)
	for scanned := 0; id < end && len(page) < limit && scanned < maxScan; id, scanned = id+1, scanned+1 {
		s := b.ids.targets[id].s
		if s == nil || !strings.HasPrefix(s.ClientID(), f.Prefix) {
			continue
		}
		if in, ok := b.info(s, f, false); ok {
			page = append(page, in)
		}
	}
	b.ids.mu.RUnlock()
	if id < end {
		next = id
	}
	return page, next
}

// Session returns the detail of client id cid's session, subscriptions included.
func (b *Broker) Session(cid string) (SessionInfo, bool) {
	b.mu.Lock()
	s := b.sessions.m[cid]
	b.mu.Unlock()
	if s == nil {
		return SessionInfo{}, false
	}
	return b.info(s, SessionFilter{}, true)
}

// info describes s if f selects it (the prefix is checked already).
func (b *Broker) info(s *session.Session, f SessionFilter, subs bool) (SessionInfo, bool) {
	user := s.Username()
	if f.Username != "" && user != f.Username {
		return SessionInfo{}, false
	}
	in := SessionInfo{ClientID: s.ClientID(), Username: user, Persistent: s.Persistent(),
		Protocol: protocolName(s.Version()), ExpiryInterval: s.Expiry()}
	in.Inflight, in.Queued = s.Pending()
	if c, ok := s.Conn().(listener.Conn); ok && c != nil {
		in.Online = true
		in.Listener = c.Listener().Name()
		if a := c.RemoteAddr(); a != nil {
			in.Address = a.String()
		}
		if cl, ok := c.Value().(*client); ok {
			in.KeepAlive = cl.keepAlive
			in.ConnectedSince = b.start.Add(time.Duration(cl.since) * time.Second).UTC()
		}
	}
	if f.Online && !in.Online || f.Persistent && !in.Persistent || f.Listener != "" && in.Listener != f.Listener {
		return SessionInfo{}, false
	}
	if subs {
		for _, sub := range s.Subs() {
			in.Subscriptions = append(in.Subscriptions, SubscriptionInfo{Filter: sub.Filter, QoS: sub.Opts.QoS,
				NoLocal: sub.Opts.NoLocal, RetainAsPublished: sub.Opts.RetainAsPublished,
				RetainHandling: sub.Opts.RetainHandling, ID: sub.ID})
		}
	}
	return in, true
}

// Kick closes client id cid's connection, with a DISCONNECT carrying rc for an MQTT 5
// client (its will is published, as for any connection the server closes); false when
// it is not connected.
func (b *Broker) Kick(cid string, rc packet.ReasonCode) bool {
	b.mu.Lock()
	s := b.sessions.m[cid]
	b.mu.Unlock()
	if s == nil || !s.Online() {
		return false
	}
	s.Disconnect(rc)
	return true
}

func protocolName(v packet.Version) string {
	switch v {
	case packet.V5:
		return "5.0"
	case packet.V311:
		return "3.1.1"
	case packet.V31:
		return "3.1"
	}
	return ""
}

// online counts a client of protocol v connected (delta 1) or gone (-1).
func (b *Broker) online(v packet.Version, delta int64) {
	b.stats.byProto[int(v)-int(packet.V31)].Add(delta) // a session's version is one of the three
}

// ClientsByProtocol returns the connected clients by protocol version name.
func (b *Broker) ClientsByProtocol() map[string]int64 {
	n := &b.stats.byProto
	return map[string]int64{"3.1": n[0].Load(), "3.1.1": n[1].Load(), "5.0": n[2].Load()}
}

// A QueueInfo is a session's backlog, for the dashboard's deepest queues.
type QueueInfo struct {
	ClientID string `json:"client_id"`
	Queued   int    `json:"queued"`
	Inflight int    `json:"inflight"`
	Online   bool   `json:"connected"`
}

// QueueScan walks the sessions from cursor on, at most maxScan IDs, and keeps in top the
// n deepest backlogs it has seen (top's order: deepest first). It returns where to go on
// (0: it reached the end). A dashboard calls it once a tick, so that a million sessions
// cost a bounded walk per tick, not a whole one.
func (b *Broker) QueueScan(cursor uint32, n int, top []QueueInfo) (next uint32, out []QueueInfo) {
	out = top
	b.ids.mu.RLock()
	end := uint32(len(b.ids.targets))
	id := max(cursor, 1)
	for scanned := 0; id < end && scanned < maxScan; id, scanned = id+1, scanned+1 {
		s := b.ids.targets[id].s
		if s == nil {
			continue
		}
		inflight, queued := s.Pending()
		if queued+inflight == 0 || len(out) == n && queued+inflight <= out[n-1].Queued+out[n-1].Inflight {
			continue
		}
		q := QueueInfo{ClientID: s.ClientID(), Queued: queued, Inflight: inflight, Online: s.Online()}
		i := len(out)
		for i > 0 && out[i-1].Queued+out[i-1].Inflight < queued+inflight {
			i--
		}
		out = slices.Insert(out, i, q)
		if len(out) > n {
			out = out[:n]
		}
	}
	b.ids.mu.RUnlock()
	if id < end {
		next = id
	}
	return next, out
}
