package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/hashicorp/memberlist"
)

// A cuttable network of memberlists: memberlist's in-memory network with links that
// can be cut, so that a partition is a test fixture.
type cuttable struct {
	net memberlist.MockNetwork
	mu  sync.Mutex
	cut map[[2]string]bool // (from, to) addresses: to gets nothing from from
}

func (n *cuttable) isCut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[[2]string{from, to}]
}

// partition cuts every link between the sides' addresses, both ways; none heals them.
func (n *cuttable) partition(sides ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[[2]string]bool{}
	for i, a := range sides {
		for j, b := range sides {
			for _, from := range a {
				for _, to := range b {
					if i != j {
						n.cut[[2]string{from, to}] = true
					}
				}
			}
		}
	}
}

// cutTransport is one member's transport on a cuttable network: what crosses a cut
// link is dropped silently (packets) or refused (streams, as a timeout would).
type cutTransport struct {
	*memberlist.MockTransport
	n         *cuttable
	self      string
	packets   chan *memberlist.Packet
	streams   chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

var errCut = errors.New("link cut")

func (n *cuttable) transport(name string) *cutTransport {
	mt := n.net.NewTransport(name)
	ip, port, _ := mt.FinalAdvertiseAddr("", 0)
	t := &cutTransport{MockTransport: mt, n: n, self: net.JoinHostPort(ip.String(), fmt.Sprint(port)),
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), done: make(chan struct{})}
	// The mock hands packets and streams over unbuffered channels, so a peer that dials a
	// member after its shutdown would wait forever; these drain them for the life of the
	// test binary and drop what arrives once the member is shut down.
	go func() {
		for p := range mt.PacketCh() {
			if n.isCut(p.From.String(), t.self) {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.done:
			}
		}
	}()
	go func() {
		for c := range mt.StreamCh() {
			select {
			case t.streams <- c:
			case <-t.done:
				_ = c.Close()
			}
		}
	}()
	return t
}

func (t *cutTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown makes the member unreachable: what is sent to it from now on is dropped.
func (t *cutTransport) Shutdown() error {
	t.closeOnce.Do(func() { close(t.done) })
	return t.MockTransport.Shutdown()
}

func (t *cutTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.n.isCut(t.self, a.Addr) {
		return time.Now(), nil
	}
	return t.MockTransport.WriteToAddress(b, a)
}

func (t *cutTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *cutTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.n.isCut(t.self, a.Addr) || t.n.isCut(a.Addr, t.self) {
		return nil, errCut
	}
	return t.MockTransport.DialAddressTimeout(a, timeout)
}

func (t *cutTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *cutTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// quickGossip shortens memberlist's timeouts so that a member is declared dead within
// about a second and forgotten (quickForget) a second later, with room left for -race on
// busy cores (members on one side must not suspect each other).
func quickGossip(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 50 * time.Millisecond
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 2
	c.PushPullInterval = 500 * time.Millisecond
	c.GossipToTheDeadTime = quickForget
	c.TCPTimeout = 500 * time.Millisecond
}

// quickForget is quickGossip's GossipToTheDeadTime.
const quickForget = time.Second

// startMember starts a membership named name on the network n, its rejoin loop every
// rejoinEvery (none when 0).
func startMember(t *testing.T, n *cuttable, name string, rejoinEvery time.Duration) *membership {
	t.Helper()
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := newMembership(name, log, func() Meta { return Meta{RPC: "127.0.0.1:1"} }, func() string { return "" }, nil)
	tr := n.transport(name)
	m.tune = func(c *memberlist.Config) {
		c.Transport = tr
		quickGossip(c)
	}
	m.answers = func(_ context.Context, addr string) bool { return !n.isCut(tr.self, addr) && !n.isCut(addr, tr.self) }
	if err := m.start(&conf.Cluster{NodeName: name, Bind: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if rejoinEvery > 0 {
		wg.Go(func() { m.rejoin(ctx, rejoinEvery) })
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = m.shutdown()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, logs)
		}
	})
	return m
}

// aliveNames returns the names of the members m sees alive or suspect, sorted.
func (m *membership) aliveNames() []string {
	var out []string
	for _, mb := range m.members() {
		if mb.State == "alive" || mb.State == "suspect" {
			out = append(out, mb.Name)
		}
	}
	return out
}

// TestRejoinAfterForgotten: four members split two and two, each side with company, for
// longer than memberlist keeps a dead member (each side forgets the other); healed, the
// rejoin loop makes the four one membership again. Without it they stay two forever:
// memberlist never contacts a member it forgot, and neither side is alone, which is when
// the join loop tries the seeds again.
func TestRejoinAfterForgotten(t *testing.T) {
	n := &cuttable{}
	var ms []*membership
	for i := range 4 {
		ms = append(ms, startMember(t, n, fmt.Sprintf("m%d", i+1), 200*time.Millisecond))
	}
	for _, m := range ms[1:] {
		if _, err := m.ml.Join([]string{ms[0].addr()}); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"m1", "m2", "m3", "m4"}
	waitMembers := func(what string, want map[*membership][]string) {
		t.Helper()
		testenv.WaitFor(t, what, func() bool {
			for m, names := range want {
				if !slices.Equal(m.aliveNames(), names) {
					return false
				}
			}
			return true
		})
	}
	waitMembers("four members", map[*membership][]string{ms[0]: all, ms[1]: all, ms[2]: all, ms[3]: all})

	n.partition([]string{ms[0].addr(), ms[1].addr()}, []string{ms[2].addr(), ms[3].addr()})
	left, right := []string{"m1", "m2"}, []string{"m3", "m4"}
	waitMembers("two sides", map[*membership][]string{ms[0]: left, ms[1]: left, ms[2]: right, ms[3]: right})
	// memberlist gossips to a dead member for GossipToTheDeadTime, then never again;
	// its forgetting has no event to wait on, so the partition lasts that long twice
	// over (the scenario's length, not a wait for something to happen).
	time.Sleep(2 * quickForget)

	n.partition()
	waitMembers("four members again", map[*membership][]string{ms[0]: all, ms[1]: all, ms[2]: all, ms[3]: all})
}
