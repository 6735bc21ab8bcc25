package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The harness: a cluster of bifrost processes on loopback. The binary is built once per
// test binary; every node gets a generated config with its own data directory and gossip
// and rpc ports reserved for its whole life (so that it restarts on the same ones and
// its peers' seeds stay right); MQTT and HTTP take free ports at each start, read from
// its log. A node's log (every run of it) is printed when the test fails.
//
//	c := newCluster(t, 3, nil)  // three nodes, bootstrap_expect 3, every node a seed
//	c.start()
//	id, leader := c.waitFormed()
//	c.node("n2").kill()         // SIGKILL; stop/cont for SIGSTOP/SIGCONT; term for SIGTERM
//	c.node("n2").start()        // again, on its data directory
//
// Other tests of the cluster (routes, ownership, faults) live beside this file and use
// the same helpers.

// binary is the bifrost command, built once.
var binary = &testenv.Binary{Pkg: "github.com/bifrost-mqtt/bifrost/cmd/bifrost"}

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Cleanup()
	os.Exit(code)
}

// startTimeout bounds a node's start, from exec to its HTTP endpoint listening.
const startTimeout = 20 * time.Second

// nodeConfig is what a node's config file is made from; change it before a (re)start.
type nodeConfig struct {
	Seeds           []string // gossip addresses; newCluster lists every node's
	BootstrapExpect int
	Secret          string
	// ClusterYAML is more of the cluster block, lines indented by four spaces
	// ("    redirect_load: 0.5\n").
	ClusterYAML string
	// YAML is more top-level blocks ("limits:\n  max_connections: 3\n").
	YAML string
}

// A node is one bifrost process of a test cluster, started and stopped by pid.
type node struct {
	t      testing.TB
	name   string
	dir    string // store.dir; the cluster's state is in dir/cluster
	file   string // its config file, written at each start
	gossip string // 127.0.0.1:port, reserved for the node's life
	rpc    string
	cfg    nodeConfig
	// host is the address its MQTT and HTTP listeners bind (port 0); netns, when not
	// "", is the network namespace it runs in, and dial how the test reaches it there
	// (netns_linux_test.go). Loopback and the test's own namespace otherwise.
	host  string
	netns string
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)

	mu   sync.Mutex
	log  strings.Builder // every run's stderr, each run headed by a line of its own
	runs int
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run's process has exited
	mqtt string        // the current run's MQTT (tcp) address
	http string        // the current run's HTTP address
}

// A testCluster is the nodes of one test.
type testCluster struct {
	t     testing.TB
	nodes []*node
}

// newCluster makes n nodes named n1..nN, not started: bootstrap_expect n, and every
// node's gossip address a seed of every node. edit, if not nil, changes node i's config.
func newCluster(t testing.TB, n int, edit func(i int, c *nodeConfig)) *testCluster {
	t.Helper()
	c := &testCluster{t: t}
	for i := range n {
		c.nodes = append(c.nodes, newNode(t, fmt.Sprintf("n%d", i+1), nodeConfig{BootstrapExpect: n}))
	}
	for i, nd := range c.nodes {
		nd.cfg.Seeds = c.gossips()
		if edit != nil {
			edit(i, &nd.cfg)
		}
	}
	return c
}

// gossips returns the gossip addresses of c's nodes.
func (c *testCluster) gossips() []string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, nd.gossip)
	}
	return out
}

// add makes one more node of c, named name, not started.
func (c *testCluster) add(name string, cfg nodeConfig) *node {
	nd := newNode(c.t, name, cfg)
	c.nodes = append(c.nodes, nd)
	return nd
}

// node returns c's node named name.
func (c *testCluster) node(name string) *node {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// split returns the first of c's nodes that is the leader (isLeader) or a follower
// (!isLeader), and the others.
func (c *testCluster) split(leader string, isLeader bool) (one *node, others []*node) {
	for _, nd := range c.nodes {
		if (nd.name == leader) == isLeader && one == nil {
			one = nd
		} else {
			others = append(others, nd)
		}
	}
	return one, others
}

// start starts every node not running, all at once, and waits for each to serve.
func (c *testCluster) start() {
	c.t.Helper()
	binary.Path(c.t) // built (or skipped, or failed) here, on the test's goroutine
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, nd := range c.nodes {
		if nd.running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = nd.spawn()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

// newNode reserves a node's ports and data directory; the test kills the node at its end
// and prints its log if it failed.
func newNode(t testing.TB, name string, cfg nodeConfig) *node {
	t.Helper()
	nd := &node{t: t, name: name, dir: t.TempDir(), gossip: testenv.FreePort(t, true), rpc: testenv.FreePort(t, false), cfg: cfg, host: "127.0.0.1"}
	nd.file = filepath.Join(t.TempDir(), name+".yaml")
	t.Cleanup(func() {
		nd.kill()
		if t.Failed() {
			t.Logf("==== log of %s (gossip %s, rpc %s)\n%s", nd.name, nd.gossip, nd.rpc, nd.logs())
		}
	})
	return nd
}

// config is the node's config file as it stands.
func (nd *node) config() string {
	seeds, _ := json.Marshal(nd.cfg.Seeds)
	if nd.cfg.Seeds == nil {
		seeds = []byte("[]")
	}
	secret := ""
	if nd.cfg.Secret != "" {
		secret = fmt.Sprintf("    secret: %q\n", nd.cfg.Secret)
	}
	auth := ""
	if nd.netns != "" { // its addresses are not loopback
		auth = "auth:\n  allow_anonymous: true\n"
	}
	return fmt.Sprintf(`listeners:
  - name: mqtt
    type: tcp
    address: %s
http:
  address: %s
store:
  dir: %q
sys_interval: 0s
log:
  level: %s
  format: text
cluster:
    node_name: %s
    bind: %s
    rpc: %s
    seeds: %s
    bootstrap_expect: %d
%s%s%s%s`, net.JoinHostPort(nd.host, "0"), net.JoinHostPort(nd.host, "0"), nd.dir, logLevel(), nd.name, nd.gossip, nd.rpc, seeds, nd.cfg.BootstrapExpect, secret, nd.cfg.ClusterYAML, auth, nd.cfg.YAML)
}

// logLevel is the nodes' log level: info, or BIFROST_CLUSTER_LOG (debug to see gossip
// and Raft at work).
func logLevel() string {
	if l := os.Getenv("BIFROST_CLUSTER_LOG"); l != "" {
		return l
	}
	return "info"
}

var (
	httpRE = regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	mqttRE = regexp.MustCompile(`msg="mqtt listening" listener=mqtt type=tcp addr=(\S+)`)
)

// start starts the node (again, on its data directory) and waits for it to serve.
func (nd *node) start() {
	nd.t.Helper()
	if err := nd.spawn(); err != nil {
		nd.t.Fatal(err)
	}
}

// spawn runs the node's process and waits until its HTTP endpoint listens. It may run
// on a goroutine of its own once the binary is built.
func (nd *node) spawn() error {
	if nd.running() {
		return fmt.Errorf("%s: already running", nd.name)
	}
	if err := os.WriteFile(nd.file, []byte(nd.config()), 0o600); err != nil {
		return err
	}
	cmd := exec.Command(binary.Path(nd.t), "-c", nd.file)
	if nd.netns != "" {
		// ip execs bifrost in the namespace: the pid is the node's.
		cmd = exec.Command("ip", "netns", "exec", nd.netns, binary.Path(nd.t), "-c", nd.file)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	nd.mu.Lock()
	nd.runs++
	fmt.Fprintf(&nd.log, "---- run %d, pid %d\n", nd.runs, cmd.Process.Pid)
	nd.cmd, nd.done, nd.mqtt, nd.http = cmd, done, "", ""
	nd.mu.Unlock()
	ready := make(chan struct{})
	go nd.readLog(stderr, cmd, done, ready)
	select {
	case <-ready:
		return nil
	case <-done:
		return fmt.Errorf("%s exited before serving (%v)", nd.name, cmd.ProcessState)
	case <-time.After(startTimeout):
		nd.kill()
		return fmt.Errorf("%s not serving after %v", nd.name, startTimeout)
	}
}

// readLog keeps the run's log and its addresses, closes ready once HTTP listens (after
// MQTT), and done once the process has exited.
func (nd *node) readLog(stderr io.Reader, cmd *exec.Cmd, done, ready chan struct{}) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		nd.mu.Lock()
		nd.log.WriteString(line + "\n")
		if m := mqttRE.FindStringSubmatch(line); m != nil {
			nd.mqtt = m[1]
		}
		m := httpRE.FindStringSubmatch(line)
		if m != nil {
			nd.http = m[1]
		}
		nd.mu.Unlock()
		if m != nil {
			close(ready)
		}
	}
	_ = cmd.Wait()
	nd.mu.Lock()
	fmt.Fprintf(&nd.log, "---- run %d ended: %v\n", nd.runs, cmd.ProcessState)
	nd.mu.Unlock()
	close(done)
}

// running reports whether the node's process runs (or is stopped by SIGSTOP).
func (nd *node) running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.done == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

func (nd *node) signal(sig os.Signal) {
	nd.mu.Lock()
	cmd := nd.cmd
	nd.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// wait waits for the current run's process to end.
func (nd *node) wait() {
	nd.mu.Lock()
	done := nd.done
	nd.mu.Unlock()
	if done != nil {
		<-done
	}
}

// kill sends SIGKILL and waits for the process to be gone; nothing when it is not running.
func (nd *node) kill() {
	nd.signal(syscall.SIGKILL)
	nd.wait()
}

// term sends SIGTERM (a graceful shutdown: the node leaves the cluster) and waits, up to
// startTimeout, for a clean exit.
func (nd *node) term() {
	nd.t.Helper()
	nd.signal(syscall.SIGTERM)
	nd.mu.Lock()
	done, cmd := nd.done, nd.cmd
	nd.mu.Unlock()
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			nd.t.Errorf("%s exited with %d after SIGTERM", nd.name, code)
		}
	case <-time.After(startTimeout):
		nd.kill()
		nd.t.Errorf("%s still running %v after SIGTERM", nd.name, startTimeout)
	}
}

func (nd *node) logs() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.log.String()
}

// dialer returns how the test opens connections to the node.
func (nd *node) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if nd.dial != nil {
		return nd.dial
	}
	return (&net.Dialer{}).DialContext
}

// connect opens an MQTT connection to the node's current run (mqttConnect).
func (nd *node) connect(id string, v packet.Version) (packet.Connack, net.Conn, error) {
	return mqttConnectWith(nd.dialer(), nd.mqttAddr(), id, v)
}

// mqttAddr and httpAddr are the current run's addresses.
func (nd *node) mqttAddr() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.mqtt
}

func (nd *node) httpAddr() string {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.http
}

// get fetches path from the node's HTTP endpoint; an error for a node that does not
// answer within a second (stopped, killed).
func (nd *node) get(path string) ([]byte, error) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: nd.dialer()}}
	resp, err := client.Get("http://" + nd.httpAddr() + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, err
}

// status is a node's GET /cluster, decoded apart from clusterlink.Status: the JSON is the
// contract the test checks.
type status struct {
	Node        string         `json:"node"`
	ClusterID   string         `json:"cluster_id"`
	State       string         `json:"state"`
	Leader      string         `json:"leader"`
	Formed      bool           `json:"formed"`
	Term        uint64         `json:"term"`
	LastIndex   uint64         `json:"last_index"`
	CommitIndex uint64         `json:"commit_index"`
	Members     []memberStatus `json:"members"`
}

type memberStatus struct {
	Name      string  `json:"name"`
	State     string  `json:"state"`
	Raft      string  `json:"raft"`
	Gossip    string  `json:"gossip"`
	RPC       string  `json:"rpc"`
	MQTT      string  `json:"mqtt"`
	ClusterID string  `json:"cluster_id"`
	Load      float64 `json:"load"`
}

// status returns the node's view of the cluster.
func (nd *node) status() (status, error) {
	var s status
	body, err := nd.get("/cluster")
	if err == nil {
		err = json.Unmarshal(body, &s)
	}
	return s, err
}

// mustStatus is status, failing the test on error.
func (nd *node) mustStatus() status {
	nd.t.Helper()
	s, err := nd.status()
	if err != nil {
		nd.t.Fatalf("%s: %v", nd.name, err)
	}
	return s
}

// member returns the member named name in s.
func (s status) member(name string) (memberStatus, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return memberStatus{}, false
}

// alive returns the names of the members s sees alive.
func (s status) alive() []string {
	var out []string
	for _, m := range s.Members {
		if m.State == "alive" {
			out = append(out, m.Name)
		}
	}
	return out
}

// metric returns the value of the node's series name{labels} ("" for none) from
// /metrics, and whether it is there.
func (nd *node) metric(series string) (float64, bool) {
	body, err := nd.get("/metrics")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// waitFormed waits until every node of nodes (all of c's when none are given) is formed
// and serves clients (it holds the lease), they agree on one cluster id and one leader,
// exactly one of them leads, and each sees every other alive and advertising that id
// (gossip carries it a moment after the log); it returns the id and the leader's name.
func (c *testCluster) waitFormed(nodes ...*node) (id, leader string) {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.nodes
	}
	var last []string
	defer func() {
		if c.t.Failed() && len(last) > 0 {
			c.t.Logf("the nodes' last views:\n%s", strings.Join(last, "\n"))
		}
	}()
	testenv.WaitFor(c.t, fmt.Sprintf("%d nodes formed into one cluster", len(nodes)), func() bool {
		id, leader, last = "", "", last[:0]
		ok, leaders := true, 0
		for _, nd := range nodes {
			s, err := nd.status()
			if err != nil {
				last = append(last, fmt.Sprintf("%s: %v", nd.name, err))
				ok = false
				continue
			}
			last = append(last, fmt.Sprintf("%s: formed %v id %q leader %q state %s members %+v",
				nd.name, s.Formed, s.ClusterID, s.Leader, s.State, s.Members))
			if !s.Formed || id != "" && (s.ClusterID != id || s.Leader != leader) {
				ok = false
			}
			id, leader = s.ClusterID, s.Leader
			if s.State == "Leader" {
				leaders++
			}
			for _, other := range nodes {
				if m, found := s.member(other.name); !found || m.State != "alive" || m.ClusterID != s.ClusterID {
					ok = false
				}
			}
			// A node serves clients once it holds the lease: formed and caught up.
			if v, found := nd.metric("bifrost_cluster_serving"); !found || v != 1 {
				last = append(last, nd.name+": not serving clients yet")
				ok = false
			}
		}
		return ok && leaders == 1
	})
	c.t.Logf("formed: cluster %s, leader %s", id, leader)
	return id, leader
}
