package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"golang.org/x/sys/unix"
)

// A netLab puts a test's nodes on a network of their own, so that links between them can
// be cut: each node runs in a network namespace with one address, 10.77.0.N/24 on its
// eth0, a veth whose other end is on a bridge in the lab's hub namespace. The hub has
// 10.77.0.254, from which the test reaches every node (MQTT, HTTP) through a socket
// opened there (dial), whatever the partition: partitions cut only node-to-node
// traffic.
//
// A cut drops packets silently on arrival, as a failed switch or firewall does, so
// senders see timeouts, not errors: a policy rule in the receiver's namespace,
// `ip rule add from <sender> iif eth0 blackhole`, consulted before the local table
// (moved from priority 0 to 100 at setup). iproute2 is all it needs; there is no
// iptables, nftables or tc netem here.
//
// Names are bft<pid>-<seq>-<node> (and -hub): unique per test run, so parallel runs do
// not collide, and a run killed before its cleanup leaves namespaces the next lab
// removes (their pid is gone). Everything is removed at the end of the test, passed or
// failed (t.Cleanup, after the nodes are killed).
type netLab struct {
	t     testing.TB
	name  string
	hub   string
	hubNS *os.File // the hub namespace, for setns

	mu    sync.Mutex
	nodes []*node
	ips   map[*node]string
	cuts  map[[2]*node]bool // (from, to): to drops what from sends
}

// Lab addresses.
const (
	labNet    = "10.77.0."
	labHubIP  = labNet + "254"
	labGossip = "7946"
	labRPC    = "7947"
)

var labSeq atomic.Int64

// newNetLab makes the hub namespace and its bridge. A test that cannot (not root, no
// CAP_NET_ADMIN, no iproute2) skips saying so, and fails in CI.
func newNetLab(t testing.TB) *netLab {
	t.Helper()
	testenv.Command(t, "ip", "apt-get install -y iproute2")
	removeStaleNamespaces(t)
	l := &netLab{t: t, name: fmt.Sprintf("bft%d-%d", os.Getpid(), labSeq.Add(1)), ips: map[*node]string{}, cuts: map[[2]*node]bool{}}
	l.hub = l.name + "-hub"
	out, err := exec.Command("ip", "netns", "add", l.hub).CombinedOutput()
	testenv.Need(t, err == nil, fmt.Sprintf("the right to make network namespaces (root, CAP_NET_ADMIN; ip netns add: %v: %s)", err, strings.TrimSpace(string(out))))
	t.Cleanup(l.remove)
	l.ip("-n", l.hub, "link", "set", "lo", "up")
	l.ip("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.hub, "addr", "add", labHubIP+"/24", "dev", "br0")
	l.ip("-n", l.hub, "link", "set", "br0", "up")
	if l.hubNS, err = os.Open("/run/netns/" + l.hub); err != nil {
		t.Fatal(err)
	}
	return l
}

// ip runs ip with args, failing the test on error.
func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the lab's namespaces: with them go the bridge and every veth.
func (l *netLab) remove() {
	if l.hubNS != nil {
		_ = l.hubNS.Close()
	}
	l.mu.Lock()
	names := []string{l.hub}
	for _, nd := range l.nodes {
		names = append(names, nd.netns)
	}
	l.mu.Unlock()
	for _, ns := range names {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.t.Errorf("ip netns del %s: %v %s", ns, err, out)
		}
	}
}

var staleRE = regexp.MustCompile(`^bft(\d+)-\d+-`)

// removeStaleNamespaces deletes the namespaces of labs whose test process is gone.
func removeStaleNamespaces(t testing.TB) {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		m := staleRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			t.Logf("stale namespace %s: %v %s", e.Name(), err, out)
		}
	}
}

// place puts nd, not started, in a namespace of its own on the lab's bridge: its gossip
// and rpc on its address, its MQTT and HTTP too, reached through the hub.
func (l *netLab) place(nd *node) {
	l.t.Helper()
	l.mu.Lock()
	i := len(l.nodes) + 1
	l.mu.Unlock()
	if i >= 254 {
		l.t.Fatal("a lab holds 253 nodes")
	}
	ns := l.name + "-" + nd.name
	addr := labNet + strconv.Itoa(i)
	l.ip("netns", "add", ns)
	l.mu.Lock()
	nd.netns = ns // removed with the lab from here on
	l.nodes = append(l.nodes, nd)
	l.ips[nd] = addr
	l.mu.Unlock()
	veth := "v" + strconv.Itoa(i)
	l.ip("-n", l.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	l.ip("-n", l.hub, "link", "set", veth, "master", "br0", "up")
	l.ip("-n", ns, "link", "set", "lo", "up")
	l.ip("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
	l.ip("-n", ns, "link", "set", "eth0", "up")
	// The local table after the cuts' rules, so that a cut drops what is addressed here.
	l.ip("-n", ns, "rule", "add", "pref", "100", "lookup", "local")
	l.ip("-n", ns, "rule", "del", "pref", "0")
	nd.host = addr
	nd.gossip = net.JoinHostPort(addr, labGossip)
	nd.rpc = net.JoinHostPort(addr, labRPC)
	nd.dial = l.dial
}

// cut makes to drop every packet from sends: one direction only. A TCP connection needs
// both, so it fails either way; UDP (gossip probes) still goes from to to from.
func (l *netLab) cut(from, to *node) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cuts[[2]*node{from, to}] {
		return
	}
	l.ip("-n", to.netns, "rule", "add", "pref", "10", "from", l.ips[from], "iif", "eth0", "blackhole")
	l.cuts[[2]*node{from, to}] = true
}

// partition cuts every link between nodes on different sides, both ways.
func (l *netLab) partition(sides ...[]*node) {
	l.t.Helper()
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, from := range a {
				for _, to := range b {
					l.cut(from, to)
				}
			}
		}
	}
}

// heal removes every cut.
func (l *netLab) heal() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.cuts {
		l.ip("-n", c[1].netns, "rule", "del", "pref", "10", "from", l.ips[c[0]], "iif", "eth0", "blackhole")
		delete(l.cuts, c)
	}
}

// dial opens a connection from the hub namespace: the socket is made on an OS thread
// moved there (setns), and stays in the hub after the thread moves back.
func (l *netLab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer home.Close()
		if err := unix.Setns(int(l.hubNS.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("setns to %s: %w", l.hub, err)}
			return
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		// A thread that cannot go home stays locked: it ends with this goroutine.
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	r := <-done
	return r.conn, r.err
}

// newNetCluster is newCluster with every node in the lab l. Their addresses are not
// loopback, so they have a secret (as bifrost requires) and admit anonymous clients.
func newNetCluster(t testing.TB, l *netLab, n int, edit func(i int, c *nodeConfig)) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	for i := range n {
		nd := newNode(t, fmt.Sprintf("n%d", i+1), nodeConfig{BootstrapExpect: n, Secret: "the secret of lab " + l.name})
		l.place(nd)
		c.nodes = append(c.nodes, nd)
	}
	for i, nd := range c.nodes {
		nd.cfg.Seeds = c.gossips()
		if edit != nil {
			edit(i, &nd.cfg)
		}
	}
	return c
}
