package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/hashicorp/memberlist"
)

// Membership: who is in the cluster, alive or not, and what each member says of itself
// (Meta), through memberlist's gossip on cluster.bind. A node advertising another cluster
// id than ours is refused: memberlist's alive delegate keeps it out of the member list,
// and its merge delegate cancels a join with it, on both sides. A node without our secret
// cannot even be read (member_refusal.go).
//
// memberlist tells a member's departure (NotifyLeave) without saying whether it failed or
// left (its Node.State is not kept up to date), so a node that closes first says so in
// its metadata (Meta.Leaving): a member gone while leaving has left, any other has failed.
//
// memberlist calls the delegate methods below from its own goroutines (the packet and
// stream handlers, the probe loop), concurrently: each takes m.mu only for a map update
// and never blocks.

// Membership settings, with their reasons.
const (
	// joinBackoffMin and joinBackoffMax bound the wait between join attempts while no
	// seed answers: quick while a cluster starts together, then no more than a dial
	// every 30s per seed for a node whose seeds are gone.
	joinBackoffMin = 250 * time.Millisecond
	joinBackoffMax = 30 * time.Second
	// aloneRecheck is how often a joined node checks it still has company; a node that
	// finds itself alone (its peers all failed and came back elsewhere, or a healed
	// partition that gossip gave up on) joins its seeds again.
	aloneRecheck = 5 * time.Second
	// pushPullInterval is how often a node exchanges its whole member list (with the
	// metadata) with a random peer; memberlist's default is 30s. Metadata changes go out
	// as gossip first, but memberlist v0.7.0's broadcast queue can drop one: when a
	// broadcast invalidates the queue's last item, the id it was given is handed out
	// again, and a later broadcast of the same length replaces it in the queue's B-tree
	// (hashicorp/memberlist PRs #263 and #322, open; seen here as a node's cluster id
	// that never reached its peers). The exchange bounds how long a peer can miss a
	// change. Its cost is the member list every 2s per node, and memberlist stretches
	// the interval beyond 32 members.
	pushPullInterval = 2 * time.Second
	// updateWait bounds the control goroutine's wait for a metadata broadcast to go out.
	// memberlist queues the broadcast and sends it whatever the wait; waiting until it
	// has been retransmitted to everyone took up to 5s here, during which the node did
	// not see that it had formed.
	updateWait = 100 * time.Millisecond
)

// A Member is one node as this node knows it.
type Member struct {
	Name string `json:"name"`
	Addr string `json:"gossip"` // its gossip address
	// State is alive, suspect (alive to gossip, but silent to this node's last probe:
	// member_suspicion.go), dead (failed) or left (gone while leaving).
	State string `json:"state"`
	Meta  Meta   `json:"-"`
	// MetaErr is why its metadata could not be read; such a node is refused.
	MetaErr error `json:"-"`
	// GoneAt is when this node learned that the member failed or left; zero while alive.
	GoneAt time.Time `json:"-"`
}

// membership is this node's memberlist and what it learned through it.
type membership struct {
	ml   *memberlist.Memberlist
	log  *slog.Logger
	self string
	// updateMu serialises UpdateNode and Leave: memberlist's UpdateNode races with
	// itself (the control goroutine's broadcasts and Close's leave).
	updateMu sync.Mutex
	// selfIP and selfPort are this node's gossip address, read once after Create:
	// memberlist.LocalNode's fields change under memberlist's lock, which it does not
	// export (UpdateNode rewrites them).
	selfIP   net.IP
	selfPort int

	local func() Meta   // this node's metadata now
	ours  func() string // our cluster id now; "" until known

	// changed is signalled (never blocking, coalesced) when a member joins, leaves or
	// changes its metadata.
	changed chan struct{}
	// onGone runs when a member fails or leaves (the rpc clients close theirs).
	onGone func(name string)
	// net is what gossip runs on: it sets memberlist's transport, and dials a failed
	// member's gossip port to see that it answers (member_rejoin.go).
	net Network

	// live and gone are this node's copy of memberlist's view, kept by the event
	// delegate: the *Node values memberlist.Members returns are rewritten under a lock
	// of memberlist's own, so reading them later races with gossip.
	mu      sync.Mutex
	live    map[string]Member // alive (or suspect) members, this node included
	suspect map[string]bool   // live members this node's probe found silent
	gone    map[string]Member // failed or left members, until they come back
	refused refusals          // member_refusal.go
}

// newMembership returns this node's membership, not started; nw nil is the host's
// network.
func newMembership(self string, log *slog.Logger, nw Network, local func() Meta, ours func() string, onGone func(string)) *membership {
	if nw == nil {
		nw = tcpNetwork{}
	}
	return &membership{self: self, log: log, net: nw, local: local, ours: ours, onGone: onGone,
		changed: make(chan struct{}, 1), live: map[string]Member{}, suspect: map[string]bool{}, gone: map[string]Member{}}
}

// memberlistConfig is memberlist's LAN configuration on k's addresses: probes every
// second, a failed member declared dead within a few seconds, fine from loopback to a
// WAN-ish link of tens of milliseconds.
func (m *membership) memberlistConfig(k *conf.Cluster) (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = k.NodeName
	c.PushPullInterval = pushPullInterval
	host, port, err := splitHostPort(k.Bind)
	if err != nil {
		return nil, fmt.Errorf("cluster.bind: %w", err)
	}
	c.BindAddr, c.BindPort = host, port
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	c.AdvertiseAddr, c.AdvertisePort = "", port // "": bind's address, or a private IP for a wildcard
	if k.Advertise != "" {
		if c.AdvertiseAddr, c.AdvertisePort, err = splitHostPort(k.Advertise); err != nil {
			return nil, fmt.Errorf("cluster.advertise: %w", err)
		}
	}
	if k.Secret != "" {
		c.SecretKey = gossipKey(k.Secret) // GossipVerifyIncoming and Outgoing stay true
	}
	c.Delegate, c.Events, c.Alive, c.Merge = m, m, m, m
	c.Logger = memberlistLogger(m.log, m.noteLog)
	c.Ping = m
	return c, nil
}

// noteLog reads each line memberlist logs: failed probes make suspects (member_suspicion.go),
// gossip it could not decrypt is a stranger refused (member_refusal.go). quiet: the line is one
// of the latter, which the refusal's own warning says.
func (m *membership) noteLog(line string) (quiet bool) {
	if m.noteUndecrypted(line) {
		return true
	}
	m.noteSuspect(line)
	return false
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// start creates the memberlist: it binds the gossip port and starts gossiping.
func (m *membership) start(k *conf.Cluster) error {
	c, err := m.memberlistConfig(k)
	if err != nil {
		return err
	}
	if err := m.net.Gossip(c); err != nil {
		return fmt.Errorf("cluster: gossip on %s: %w", k.Bind, err)
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		return fmt.Errorf("cluster: gossip on %s: %w", k.Bind, err)
	}
	m.ml = ml
	self := ml.LocalNode() // no update can run yet: the control goroutine starts later
	m.selfIP, m.selfPort = slices.Clone(self.Addr), int(self.Port)
	return nil
}

// addr is this node's gossip address as peers see it.
func (m *membership) addr() string {
	return net.JoinHostPort(m.selfIP.String(), strconv.Itoa(m.selfPort))
}

// join joins the seeds until one answers, and again whenever this node finds itself
// alone. A seed that is down does not hold up the node's start: this runs on its own
// goroutine until ctx ends.
// tried is set after the first attempt.
func (m *membership) join(ctx context.Context, seeds []string, tried *atomic.Bool) {
	backoff := joinBackoffMin
	for {
		others := m.otherSeeds(ctx, seeds)
		if len(others) == 0 {
			return // only this node is listed: others join it
		}
		wait := aloneRecheck
		if m.ml.NumMembers() <= 1 {
			n, err := 0, errNoSeed
			if live := m.answering(ctx, others); len(live) > 0 {
				n, err = m.ml.Join(live)
			}
			switch {
			case n > 0:
				m.log.Info("cluster: joined", "seeds", others, "members", m.ml.NumMembers())
				backoff = joinBackoffMin
			case backoff == joinBackoffMin:
				m.log.Info("cluster: no seed answered yet; retrying", "seeds", others, "err", err)
				fallthrough
			default:
				m.log.Debug("cluster: join failed", "seeds", others, "err", err, "retry in", backoff)
				wait, backoff = backoff, min(2*backoff, joinBackoffMax)
			}
			tried.Store(true)
		} else {
			backoff = joinBackoffMin // in company (others joined it): alone again is news
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// otherSeeds returns seeds without this node's own gossip address.
func (m *membership) otherSeeds(ctx context.Context, seeds []string) []string {
	var out []string
	for _, s := range seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			continue
		}
		if port == strconv.Itoa(m.selfPort) {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ips, _ := net.DefaultResolver.LookupIPAddr(lctx, host)
			cancel()
			if slices.ContainsFunc(ips, func(ip net.IPAddr) bool { return ip.IP.Equal(m.selfIP) || ip.IP.IsUnspecified() }) {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// members returns every member this node knows: the live ones (alive or suspect) and
// those that failed or left, which the leader's reconciliation tells apart.
func (m *membership) members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.live)+len(m.gone))
	for name, l := range m.live {
		if m.suspect[name] {
			l.State = "suspect"
		}
		out = append(out, l)
	}
	for name, g := range m.gone {
		if _, ok := m.live[name]; !ok {
			out = append(out, g)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return cmpString(a.Name, b.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// member is a live member, copied from n: the caller holds memberlist's lock (an event
// delegate's call), under which memberlist changes n's fields.
func member(n *memberlist.Node) Member {
	mb := Member{Name: n.Name, Addr: n.Address(), State: "alive"}
	mb.Meta, mb.MetaErr = decodeMeta(n.Meta)
	return mb
}

// lookup returns the live member named name.
func (m *membership) lookup(name string) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb, ok := m.live[name]
	return mb, ok
}

// speaks reports whether every member this node knows of runs protocol v or later, those
// that left aside: a command that needs v may go to the log. A failed member counts: it
// may come back as it was and apply the log from where it stopped.
func (m *membership) speaks(v uint8) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.live {
		if l.MetaErr == nil && l.Meta.Protocol < v {
			return false
		}
	}
	for _, g := range m.gone {
		if g.State == "dead" && g.MetaErr == nil && g.Meta.Protocol < v {
			return false
		}
	}
	return true
}

// goneAt is when this node learned that the member named failed or left; false when it
// is alive or unknown.
func (m *membership) goneAt(name string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.gone[name]
	return g.GoneAt, ok
}

// update broadcasts this node's metadata after a change, waiting up to timeout for it to
// go out.
func (m *membership) update(timeout time.Duration) error {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	return m.ml.UpdateNode(timeout)
}

// leave tells the others this node leaves (they mark it left, not failed), waiting up to
// timeout for the message to go out.
func (m *membership) leave(timeout time.Duration) error {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	return m.ml.Leave(timeout)
}

func (m *membership) shutdown() error {
	if m.ml == nil {
		return nil
	}
	return m.ml.Shutdown()
}

func (m *membership) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// errNoSeed is a join attempt's outcome when no seed accepts a connection.
var errNoSeed = errors.New("no seed accepts connections")

// errForeign refuses a node of another cluster.
var errForeign = errors.New("a node of another cluster")

// check refuses a node whose metadata cannot be read or that advertises another
// cluster's id.
func (m *membership) check(n *memberlist.Node) error {
	if n.Name == m.self {
		return nil
	}
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		return err
	}
	if ours := m.ours(); ours != "" && meta.ClusterID != "" && meta.ClusterID != ours {
		return fmt.Errorf("%w: it belongs to cluster %s, this node to %s", errForeign, meta.ClusterID, ours)
	}
	return nil
}

// NotifyAlive is memberlist's alive delegate: an error keeps n out of the member list.
// An alive message about a suspect (its answer to the suspicion) clears it.
func (m *membership) NotifyAlive(n *memberlist.Node) error {
	if err := m.check(n); err != nil {
		return m.refuse(n, err)
	}
	m.clearSuspect(n.Name)
	return nil
}

// NotifyMerge is memberlist's merge delegate: an error cancels a join whose other side
// knows a node this one refuses.
func (m *membership) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if err := m.check(n); err != nil {
			return m.refuse(n, err)
		}
	}
	return nil
}

// NodeMeta is this node's metadata, for memberlist's alive messages. Start checked that it
// fits limit.
func (m *membership) NodeMeta(limit int) []byte {
	b := appendMeta(make([]byte, 0, 64), m.local())
	if len(b) > limit { // memberlist would panic; the addresses were checked at Start
		return b[:0]
	}
	return b
}

// NotifyMsg, GetBroadcasts, LocalState and MergeRemoteState carry no user data: the
// cluster's own traffic goes over gRPC.
func (m *membership) NotifyMsg([]byte)                           {}
func (m *membership) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (m *membership) LocalState(join bool) []byte                { return nil }
func (m *membership) MergeRemoteState(buf []byte, join bool)     {}

// NotifyJoin is the event delegate's: a member joined (or came back). Like every event
// delegate method it runs under memberlist's lock.
func (m *membership) NotifyJoin(n *memberlist.Node) {
	mb := member(n)
	m.mu.Lock()
	m.live[n.Name] = mb
	delete(m.gone, n.Name)
	delete(m.suspect, n.Name)
	m.mu.Unlock()
	m.log.Debug("cluster: member joined", "node", n.Name, "addr", n.Address())
	m.signal()
}

// NotifyLeave is the event delegate's: a member failed (dead) or left gracefully (left).
func (m *membership) NotifyLeave(n *memberlist.Node) {
	if n.Name == m.self {
		return
	}
	g := member(n)
	g.State = "dead"
	g.GoneAt = time.Now()
	if g.MetaErr == nil && g.Meta.Leaving {
		g.State = "left"
	}
	m.mu.Lock()
	delete(m.live, n.Name)
	delete(m.suspect, n.Name)
	m.gone[n.Name] = g
	m.mu.Unlock()
	m.log.Info("cluster: member gone", "node", n.Name, "state", g.State)
	if m.onGone != nil {
		m.onGone(n.Name)
	}
	m.signal()
}

// NotifyUpdate is the event delegate's: a member's metadata changed.
func (m *membership) NotifyUpdate(n *memberlist.Node) {
	mb := member(n)
	m.mu.Lock()
	m.live[n.Name] = mb
	m.mu.Unlock()
	m.signal()
}
