package bifrost_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestSingleNodeNoCluster: without a cluster block the broker opens no socket but its
// MQTT listener and HTTP endpoint, runs no cluster goroutine (none labelled cluster,
// none of memberlist, Raft or gRPC) and writes no cluster state. The same checks on a
// node with a cluster block find all three, so they can fail.
func TestSingleNodeNoCluster(t *testing.T) {
	before := sockets(t)
	cfg := testConfig(t)
	b, _ := start(t, cfg)
	opened := newSockets(t, before)
	want := map[string]bool{"tcp:" + port(b.HTTPAddr()): true}
	for _, a := range b.Addrs() {
		want["tcp:"+port(a)] = true
	}
	if !equalSets(opened, want) {
		t.Errorf("sockets opened by a single node: %v; want only the MQTT listeners' and HTTP's %v", keys(opened), keys(want))
	}
	if g := clusterGoroutines(); g != "" {
		t.Errorf("a single node runs cluster goroutines:\n%s", g)
	}
	if _, err := os.Stat(filepath.Join(cfg.Store.Dir, "cluster")); !os.IsNotExist(err) {
		t.Errorf("a single node made %s/cluster (%v)", cfg.Store.Dir, err)
	}
	if code, _, err := get(t, b.HTTPAddr(), "/cluster"); err != nil || code != 404 {
		t.Errorf("GET /cluster on a single node: %d %v; want 404", code, err)
	}
}

// TestClusterNodeStartsAndLeaves: with a cluster block (bootstrap_expect 1) the node
// opens the gossip (TCP and UDP) and rpc ports, runs the cluster's goroutines, keeps its
// state in <store.dir>/cluster and forms a cluster of one, shown at /cluster; Close
// leaves it and ends every one of them.
func TestClusterNodeStartsAndLeaves(t *testing.T) {
	before := sockets(t)
	cfg := testConfig(t)
	cfg.Cluster = &bifrost.Cluster{NodeName: "solo", Bind: "127.0.0.1:0", RPC: "127.0.0.1:0", BootstrapExpect: 1}
	var logs syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	var st struct {
		ClusterID string `json:"cluster_id"`
		Formed    bool   `json:"formed"`
		Members   []struct {
			Name, Gossip, RPC, MQTT string
		} `json:"members"`
	}
	testenv.WaitFor(t, "a cluster of one formed", func() bool {
		code, body, err := get(t, b.HTTPAddr(), "/cluster")
		return err == nil && code == 200 && json.Unmarshal([]byte(body), &st) == nil && st.Formed && len(st.Members) == 1
	})
	self := st.Members[0]
	if self.MQTT != b.Addrs()[0].String() {
		t.Errorf("advertised MQTT address %q; want the listener's %s", self.MQTT, b.Addrs()[0])
	}
	_, gossipPort, _ := net.SplitHostPort(self.Gossip)
	_, rpcPort, _ := net.SplitHostPort(self.RPC)
	opened := newSockets(t, before)
	for _, s := range []string{"tcp:" + gossipPort, "udp:" + gossipPort, "tcp:" + rpcPort} {
		if !opened[s] {
			t.Errorf("no socket %s on a cluster node; opened %v", s, keys(opened))
		}
	}
	if g := clusterGoroutines(); g == "" {
		t.Error("no cluster goroutine on a cluster node")
	}
	if _, err := os.Stat(filepath.Join(cfg.Store.Dir, "cluster", "cluster-id")); err != nil {
		t.Errorf("no cluster state: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if g := clusterGoroutines(); g != "" {
		t.Errorf("cluster goroutines after Close:\n%s", g)
	}
	if left := newSockets(t, before); len(left) > 0 {
		t.Errorf("sockets left after Close: %v", keys(left))
	}
}

// clusterGoroutines returns the goroutines labelled as the cluster's or running in
// memberlist, Raft or gRPC; "" when there are none.
func clusterGoroutines() string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, `"bifrost":"cluster`) || strings.Contains(g, "hashicorp/memberlist") ||
			strings.Contains(g, "hashicorp/raft") || strings.Contains(g, "google.golang.org/grpc") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// sockets returns this process's TCP listening and UDP sockets as "tcp:PORT", "udp:PORT",
// from /proc.
func sockets(t *testing.T) map[string]bool {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	out := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6", "udp", "udp6"} {
		file, err := os.Open("/proc/self/net/" + f)
		if err != nil {
			continue // no IPv6
		}
		sc := bufio.NewScanner(file)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			if strings.HasPrefix(f, "tcp") && fields[3] != "0A" { // not listening
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			p, _ := strconv.ParseUint(hexPort, 16, 16)
			out[fmt.Sprintf("%s:%d", f[:3], p)] = true
		}
		_ = file.Close()
	}
	return out
}

// newSockets returns the sockets open now that were not in before.
func newSockets(t *testing.T, before map[string]bool) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for s := range sockets(t) {
		if !before[s] {
			out[s] = true
		}
	}
	return out
}

func port(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
