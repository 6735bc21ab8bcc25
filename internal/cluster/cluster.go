package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Timings of the Cluster itself, with their reasons.
const (
	// controlTick is how often the control goroutine looks again without being woken:
	// membership and leadership changes wake it at once; the tick retries what failed.
	controlTick = time.Second
	// applyRetry is the pause before an Apply tries again while there is no leader.
	applyRetry = 50 * time.Millisecond
	// applyTimeout bounds an Apply whose context has no deadline.
	applyTimeout = 10 * time.Second
	// leaveTimeout bounds Close's wait to be removed from the Raft configuration.
	leaveTimeout = 5 * time.Second
	// leaveNoLeader ends that wait early when no leader is left to remove this node:
	// longer than an election.
	leaveNoLeader = 3 * raftElectionTimeout
	// loadStep is the change of the load figure that is worth a metadata broadcast.
	loadStep = 0.01
	// maxMQTTAddr is the longest MQTT address advertised: a DNS name and a port.
	maxMQTTAddr = 253 + 6
)

var errClosed = errors.New("cluster: closed")

// A Command is a change of the replicated state (internal/cluster/fsm); this package
// makes them.
type Command = fsm.Command

// Options configure a Cluster.
type Options struct {
	// Config is the cluster block with its defaults filled (conf.Config.EnsureDefaults).
	Config *conf.Cluster
	Logger *slog.Logger
	// Metrics receives the cluster's collectors; nil registers none.
	Metrics *metrics.Registry
	// Go starts the cluster's goroutines (the broker's starter: labelled, counted);
	// false means the broker is closing. nil: plain goroutines labelled bifrost=NAME.
	Go func(name string, f func(ctx context.Context)) bool
	// Load is the node's load figure from 0 to 1 (metrics.Load), advertised to the other
	// nodes; nil advertises 0.
	Load func() float64
	// SysInterval is how often the node publishes the cluster's totals in $SYS
	// (sys_interval; admin_sys.go); 0: never. Its peers get its figures either way.
	SysInterval time.Duration
	// Network carries the rpc port and gossip (net_network.go); nil: the host's, TCP and
	// memberlist's own transport. The package's tests give an in-memory one.
	Network Network
}

// A Cluster is this node's part in a cluster: membership, Raft, the rpc port. The broker
// holds one when its configuration has a cluster block. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg     conf.Cluster
	log     *slog.Logger
	goFn    func(string, func(context.Context)) bool
	load    func() float64
	metrics *metrics.Registry
	network Network

	ctx    context.Context // cancelled by Close: ends the cluster's goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup // the cluster's own goroutines

	mu      sync.Mutex // guards started and closed
	started bool
	closed  bool

	// Set by Start, read-only afterwards.
	stores   *raftStores
	mux      *mux
	trans    *raft.NetworkTransport
	fsm      *fsm.FSM
	raft     *raft.Raft
	grpc     *grpc.Server
	ms       *membership
	peers    *peers
	rpcAddr  string // advertised
	hadState bool   // Raft state existed at Start
	mets     *clusterMetrics
	routes   *routes    // routes.go
	fwd      *forwarder // forward.go

	ret         retainer      // retained.go: retained changes on their way to the log
	sysInterval time.Duration // admin_sys.go: $SYS totals every interval; 0: none
	authf       authSync      // auth_files.go, auth_local.go: the auth files in force

	attachedHost atomic.Pointer[broker.ClusterHost] // host.go: the broker, once attached

	mqttAddr     atomic.Pointer[string]
	redirectTo   atomic.Pointer[string] // where new MQTT 5 clients go; "" here (member_load.go)
	fileID       atomic.Pointer[string] // the id kept in the data directory
	bootstrapped atomic.Bool
	joinTried    atomic.Bool // the seeds were tried once (or there are none)
	leaving      atomic.Bool // Close has begun: the metadata says so
	formed       chan struct{}
	formedOnce   sync.Once
	wake         chan struct{} // wakes the control goroutine

	// The control goroutine's own.
	lastWhy   string
	published Meta

	own     ownership   // owner.go: client-id claims, hand-over, the lease
	leaders leaderWatch // raft_leader.go: the leadership forwarded Applies run under
}

// New returns a Cluster for o, not started: it opens nothing and starts no goroutine.
func New(o Options) (*Cluster, error) {
	if o.Config == nil {
		return nil, errors.New("cluster: no configuration")
	}
	c := &Cluster{cfg: *o.Config, log: o.Logger, goFn: o.Go, load: o.Load, metrics: o.Metrics, network: o.Network,
		sysInterval: o.SysInterval, formed: make(chan struct{}), wake: make(chan struct{}, 1)}
	c.ret.wake = make(chan struct{}, 1)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.goFn == nil {
		c.goFn = func(name string, f func(context.Context)) bool {
			go pprof.Do(context.Background(), pprof.Labels("bifrost", name), f)
			return true
		}
	}
	if c.load == nil {
		c.load = func() float64 { return 0 }
	}
	if c.network == nil {
		c.network = tcpNetwork{}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.own.init()
	c.routes, c.fwd = newRoutes(c), newForwarder(c)
	empty := ""
	c.mqttAddr.Store(&empty)
	c.redirectTo.Store(&empty)
	c.fileID.Store(&empty)
	if c.cfg.MQTTAdvertise != "" {
		c.mqttAddr.Store(&c.cfg.MQTTAdvertise)
	}
	return c, nil
}

// Start opens the Raft state in the data directory, listens on the rpc port, starts Raft
// and gossip, and returns; joining the seeds and forming the cluster go on in the
// background (Wait). ctx bounds the start only. After an error, Close the Cluster.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return errClosed
	case c.started:
		return errors.New("cluster: already started")
	}
	c.started = true
	var err error
	// Raft's, memberlist's and gRPC's goroutines inherit this label.
	pprof.Do(ctx, pprof.Labels("bifrost", "cluster"), func(ctx context.Context) { err = c.start(ctx) })
	return err
}

func (c *Cluster) start(ctx context.Context) error {
	k := &c.cfg
	if err := os.MkdirAll(k.Dir, 0o700); err != nil {
		return fmt.Errorf("cluster: data directory: %w", err)
	}
	id, err := readClusterID(k.Dir)
	if err != nil {
		return err
	}
	c.fileID.Store(&id)
	if c.stores, err = openRaftStores(k.Dir, c.log); err != nil {
		return err
	}
	if c.hadState, err = c.stores.hasState(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: start: %w", err)
	}

	ln, err := c.network.Listen(k.RPC)
	if err != nil {
		return fmt.Errorf("cluster: rpc listen: %w", err)
	}
	if c.rpcAddr, err = advertisedRPC(k, ln.Addr()); err != nil {
		_ = ln.Close()
		return err
	}
	// The metadata must fit memberlist's limit with any MQTT address SetMQTTAddr may set.
	if n := len(appendMeta(nil, Meta{RPC: c.rpcAddr, MQTT: strings.Repeat("m", maxMQTTAddr), ClusterID: newClusterID(), Load: 1,
		AuthDigest: strings.Repeat("d", authDigestLen)})); n > memberlist.MetaMaxSize {
		_ = ln.Close()
		return fmt.Errorf("cluster: the advertised addresses take %d bytes of gossip metadata; at most %d fit", n, memberlist.MetaMaxSize)
	}
	serverTLS, clientTLS, err := c.tlsConfigs()
	if err != nil {
		_ = ln.Close()
		return err
	}
	c.mux = newMux(ln, serverTLS, c.log, c.spawn)
	c.peers = newPeers(clientTLS, c.network)
	c.ms = newMembership(k.NodeName, c.log, c.network, c.localMeta, c.ClusterID, func(name string) {
		c.peers.drop(name)
		c.routes.gone(name) // its routes leave at once
	})

	c.fsm = fsm.New(fsm.Hooks{Changed: c.stateChanged, Applied: c.applied,
		Retained: c.retainedStore(), RetainedApplied: c.ret.appliedHere})
	c.trans = newTransport(c.ctx, c.mux, c.network, c.rpcAddr, clientTLS, c.raftAddress, newHCLogger(c.log, "raft"))
	if c.raft, err = raft.NewRaft(raftConfig(k.NodeName, newHCLogger(c.log, "raft")), c.fsm,
		c.stores.logs, c.stores.stable, c.stores.snaps, c.trans); err != nil {
		return fmt.Errorf("cluster: raft: %w", err)
	}
	c.grpc = grpc.NewServer()
	clusterpb.RegisterClusterServer(c.grpc, rpcServer{c: c})
	if c.metrics != nil {
		if c.mets, err = registerMetrics(c.metrics, c); err != nil {
			return err
		}
		if err := c.metrics.RegisterPrometheus(routesCollector{c}); err != nil {
			return err
		}
	}
	if err := c.ms.start(k); err != nil {
		return err
	}
	c.published = c.localMeta()

	c.spawn("cluster rpc", c.mux.serve)
	c.spawn("cluster grpc", func(context.Context) {
		if err := c.grpc.Serve(c.mux.grpc); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			c.log.Error("cluster: grpc server stopped", "err", err)
		}
	})
	c.spawn("cluster join", func(ctx context.Context) {
		if len(c.ms.otherSeeds(ctx, k.Seeds)) == 0 {
			c.joinTried.Store(true)
			return
		}
		c.ms.join(ctx, k.Seeds, &c.joinTried)
	})
	c.spawn("cluster rejoin", func(ctx context.Context) { c.ms.rejoin(ctx, rejoinInterval) })
	c.spawn("cluster retained", c.retainLoop)
	c.spawn("cluster retained expiry", c.retainSweep)
	if c.sysInterval > 0 {
		c.spawn("cluster sys", c.sysLoop)
	}
	if c.metrics != nil {
		if err := c.metrics.RegisterPrometheus(retainedCollector{c}); err != nil {
			return err
		}
		if err := c.metrics.RegisterPrometheus(authCollector{c}); err != nil {
			return err
		}
	}
	c.spawn("cluster leader watch", c.watchLeader)
	c.spawn("cluster control", c.control)
	c.startOwnership()
	c.spawn("cluster routes", func(ctx context.Context) { c.routes.run(ctx.Done()) })
	if c.authf.local != nil {
		c.spawn("cluster auth seed", c.seedAuth) // auth_local.go
	}
	c.log.Info("cluster: started", "node", k.NodeName, "gossip", c.ms.addr(), "rpc", c.rpcAddr, "dir", k.Dir,
		"raft_state", c.hadState, "cluster_id", id, "secret", k.Secret != "")
	return nil
}

// tlsConfigs are the rpc port's TLS settings; nil without a secret.
func (c *Cluster) tlsConfigs() (server, client *tls.Config, err error) {
	if c.cfg.Secret == "" {
		return nil, nil, nil
	}
	return tlsConfigs(c.cfg.Secret)
}

// advertisedRPC is the rpc address peers dial: rpc_advertise, else the listener's with a
// wildcard host replaced by the gossip address's host, or a private IP as memberlist
// chooses one.
func advertisedRPC(k *conf.Cluster, bound net.Addr) (string, error) {
	if k.RPCAdvertise != "" {
		return k.RPCAdvertise, nil
	}
	host, _, _ := net.SplitHostPort(k.RPC)
	_, port, _ := net.SplitHostPort(bound.String())
	if host != "" && !net.ParseIP(host).IsUnspecified() {
		return net.JoinHostPort(host, port), nil
	}
	for _, a := range []string{k.Advertise, k.Bind} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !net.ParseIP(h).IsUnspecified() {
			return net.JoinHostPort(h, port), nil
		}
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil || ip == "" {
		return "", fmt.Errorf("cluster: no address to advertise for rpc %s (set cluster.rpc_advertise): %v", k.RPC, err)
	}
	return net.JoinHostPort(ip, port), nil
}

// spawn runs f on a goroutine of the broker's, with a context that Close cancels, and
// counts it for Close.
func (c *Cluster) spawn(name string, f func(ctx context.Context)) bool {
	c.wg.Add(1)
	ok := c.goFn(name, func(ctx context.Context) {
		defer c.wg.Done()
		ctx, cancel := context.WithCancel(ctx)
		defer context.AfterFunc(c.ctx, cancel)()
		defer cancel()
		f(ctx)
	})
	if !ok {
		c.wg.Done()
	}
	return ok
}

// SetMQTTAddr sets the MQTT address advertised to the other nodes, unless mqtt_advertise
// set one: the broker calls it with its first tcp listener's address once it listens. A
// wildcard host is replaced by the rpc address's.
func (c *Cluster) SetMQTTAddr(addr string) {
	if c.cfg.MQTTAdvertise != "" {
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || len(addr) > maxMQTTAddr {
		c.log.Warn("cluster: not advertising this MQTT address", "addr", addr, "err", err)
		return
	}
	if host == "" || net.ParseIP(host).IsUnspecified() {
		if h, _, err := net.SplitHostPort(c.rpcAddr); err == nil {
			addr = net.JoinHostPort(h, port)
		}
	}
	c.mqttAddr.Store(&addr)
	c.signal()
}

// MQTTAddr returns the MQTT address this node advertises; "" until known.
func (c *Cluster) MQTTAddr() string { return *c.mqttAddr.Load() }

// ClusterID returns the cluster's id: from the applied log, or until it is replayed, from
// the data directory; "" before the cluster is formed.
func (c *Cluster) ClusterID() string {
	if c.fsm != nil {
		if id := c.fsm.ClusterID(); id != "" {
			return id
		}
	}
	return *c.fileID.Load()
}

// stateChanged runs on Raft's FSM goroutine after each applied command and restore: it
// puts changed auth files in force and keeps a new cluster id in the data directory.
func (c *Cluster) stateChanged() {
	c.authChanged()
	id := c.fsm.ClusterID()
	if id == "" || id == *c.fileID.Load() {
		return
	}
	if old := *c.fileID.Load(); old != "" {
		c.log.Error("cluster: the log holds another cluster id than the data directory; keeping the log's",
			"log", id, "dir", old)
	}
	if err := writeClusterID(c.cfg.Dir, id); err != nil {
		c.log.Error("cluster: keep the cluster id", "err", err)
	}
	c.fileID.Store(&id)
	c.signal()
}

// hasState reports whether this node has Raft state (it never bootstraps then).
func (c *Cluster) hasState() bool {
	return c.hadState || c.bootstrapped.Load() || c.raft.LastIndex() > 0
}

// localMeta is this node's metadata now.
func (c *Cluster) localMeta() Meta {
	return Meta{Protocol: protocolVersion, HasState: c.hasState(), Leaving: c.leaving.Load(), RPC: c.rpcAddr,
		MQTT: c.MQTTAddr(), ClusterID: c.ClusterID(), Load: c.load(), AuthDigest: c.authDigest()}
}

func (c *Cluster) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// raftAddress is Raft's address book: a live member's rpc address.
func (c *Cluster) raftAddress(id raft.ServerID) (raft.ServerAddress, bool) {
	m, ok := c.ms.lookup(string(id))
	if !ok || m.MetaErr != nil || m.Meta.RPC == "" {
		return "", false
	}
	return raft.ServerAddress(m.Meta.RPC), true
}

// control is the goroutine that forms the cluster, keeps Raft's configuration in step
// with membership while this node leads, and broadcasts metadata changes.
func (c *Cluster) control(ctx context.Context) {
	tick := time.NewTicker(controlTick)
	defer tick.Stop()
	leader := c.raft.LeaderCh()
	for {
		c.refreshRedirect(c.publishMeta().Load)
		switch {
		case !c.hasState() && c.ClusterID() == "":
			c.tryBootstrap(ctx)
		case c.raft.State() == raft.Leader:
			c.reconcile(ctx)
		}
		if c.isFormed() {
			c.formedOnce.Do(func() {
				close(c.formed)
				leader, _ := c.Leader()
				c.log.Info("cluster: formed", "cluster_id", c.ClusterID(), "leader", leader)
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.ms.changed:
		case <-leader:
		case <-c.wake:
		}
	}
}

// publishMeta broadcasts this node's metadata when it changed, and returns it.
func (c *Cluster) publishMeta() Meta {
	m := c.localMeta()
	p := c.published
	if m.HasState == p.HasState && m.Leaving == p.Leaving && m.MQTT == p.MQTT && m.ClusterID == p.ClusterID &&
		m.AuthDigest == p.AuthDigest && m.Load > p.Load-loadStep && m.Load < p.Load+loadStep {
		return m
	}
	if err := c.ms.update(updateWait); err != nil {
		c.log.Debug("cluster: metadata broadcast still going out", "err", err)
	}
	c.published = m
	return m
}

// isFormed reports whether the cluster has an id and a leader, and this node is in its
// configuration.
func (c *Cluster) isFormed() bool {
	if c.ClusterID() == "" {
		return false
	}
	if _, ok := c.Leader(); !ok {
		return false
	}
	_, in := c.suffrage()[c.cfg.NodeName]
	return in
}

// suffrage returns the servers of the latest Raft configuration by name: voter or
// nonvoter.
func (c *Cluster) suffrage() map[string]string {
	out := map[string]string{}
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return out
	}
	for _, s := range f.Configuration().Servers {
		out[string(s.ID)] = map[raft.ServerSuffrage]string{raft.Voter: "voter", raft.Nonvoter: "nonvoter", raft.Staging: "staging"}[s.Suffrage]
	}
	return out
}

// Wait returns once the cluster has been formed with this node in it (an id, a leader,
// this node in the Raft configuration), or with ctx's error.
func (c *Cluster) Wait(ctx context.Context) error {
	select {
	case <-c.formed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IsLeader reports whether this node is the Raft leader.
func (c *Cluster) IsLeader() bool {
	return c.raft != nil && c.raft.State() == raft.Leader
}

// Leader returns the name of the leader as this node knows it; false when it knows none.
func (c *Cluster) Leader() (string, bool) {
	if c.raft == nil {
		return "", false
	}
	_, id := c.raft.LeaderWithID()
	return string(id), id != ""
}

// Members returns every member this node knows with its metadata: the live ones, and
// those that failed or left.
func (c *Cluster) Members() []Member {
	if c.ms == nil || c.ms.ml == nil {
		return nil
	}
	return c.ms.members()
}

// An applyError is the state machine refusing a command.
type applyError struct{ error }

// Apply appends cmd to the Raft log, on this node if it leads or forwarded to the leader
// over gRPC, and returns the command's result once the leader has applied it. While there
// is no leader (an election) it waits, up to ctx's deadline (applyTimeout without one); a
// forwarded command whose leader changes before it answers goes to the next one. A
// leader that fails mid-call, or is left so, may have applied the command before a retry
// applies it again: commands are written to be idempotent (a claim's outcome is its first
// application's: owner_again.go).
func (c *Cluster) Apply(ctx context.Context, cmd Command) ([]byte, error) {
	res, _, err := c.applyIndexed(ctx, cmd)
	return res, err
}

// applyIndexed is Apply, and returns the index of the entry too.
func (c *Cluster) applyIndexed(ctx context.Context, cmd Command) ([]byte, uint64, error) {
	res, index, _, err := c.applyTracked(ctx, cmd)
	return res, index, err
}

// applyTracked is applyIndexed, and tells whether an earlier attempt may have been
// applied too (again): it reached a leader and got no answer, which was then tried
// again (the leader changed, or failed mid-call). The entry at index is then the last of
// the command's applications.
func (c *Cluster) applyTracked(ctx context.Context, cmd Command) (res []byte, index uint64, again bool, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, applyTimeout)
		defer cancel()
	}
	data := fsm.Encode(cmd)
	start := time.Now()
	for {
		if c.ctx.Err() != nil {
			return nil, 0, again, errClosed
		}
		a := c.applyOnce(ctx, data)
		if !a.retry {
			if a.err == nil && c.mets != nil {
				c.mets.apply.WithLabelValues(a.via).Observe(time.Since(start).Seconds())
			}
			return a.res, a.index, again, a.err
		}
		again = again || a.sent
		select {
		case <-ctx.Done():
			return nil, 0, again, fmt.Errorf("cluster: apply: no leader took the command: %w", ctx.Err())
		case <-time.After(applyRetry):
		}
	}
}

// An attempt is one try of an Apply: its outcome, or retry (there is no leader, or it
// changed), with sent when the command reached a leader (it may have been applied).
type attempt struct {
	via   string
	res   []byte
	index uint64
	err   error
	retry bool
	sent  bool
}

// applyOnce tries the leader this node knows. A command forwarded to it is given up
// (retry) when the leader this node knows changes: a leader paused or cut off never
// answers, and its followers elect another within an election or two, to which the
// command goes next (raft_leader.go).
func (c *Cluster) applyOnce(ctx context.Context, data []byte) attempt {
	if c.raft.State() == raft.Leader {
		res, index, err := c.applyLocal(ctx, data)
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
			errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return attempt{retry: true, sent: errors.Is(err, raft.ErrLeadershipLost)}
		}
		return attempt{via: "leader", res: res, index: index, err: err}
	}
	leadership := c.leaders.current() // before the leader is read: a change after it ends this
	addr, id := c.raft.LeaderWithID()
	if id == "" {
		return attempt{retry: true}
	}
	if m, ok := c.ms.lookup(string(id)); ok && m.Meta.RPC != "" {
		addr = raft.ServerAddress(m.Meta.RPC)
	}
	until, err := c.validUntil(ctx)
	if err != nil {
		return attempt{err: err}
	}
	cl, err := c.peers.client(string(id), string(addr))
	if err != nil {
		return attempt{err: err, retry: !errors.Is(err, errClosed)}
	}
	fctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(leadership, cancel)
	reply, err := cl.Apply(fctx, &clusterpb.ApplyRequest{Command: data, ValidUntil: until})
	stop()
	cancel()
	switch code := status.Code(err); {
	case code == codes.OK:
	case code == codes.FailedPrecondition, code == codes.Unavailable:
		return attempt{retry: true, sent: true}
	case leadership.Err() != nil && ctx.Err() == nil:
		leader, _ := c.Leader()
		c.log.Debug("cluster: apply: the leader changed while it had the command; sending it again",
			"was", id, "now", leader)
		return attempt{retry: true, sent: true}
	default:
		return attempt{err: fmt.Errorf("cluster: apply on %s: %w", id, err)}
	}
	if reply.Error != "" {
		return attempt{via: "forwarded", index: reply.Index, err: applyError{errors.New(reply.Error)}}
	}
	return attempt{via: "forwarded", res: reply.Result, index: reply.Index}
}

// applyLocal applies data on this node, which must lead, and waits until it is applied.
func (c *Cluster) applyLocal(ctx context.Context, data []byte) ([]byte, uint64, error) {
	timeout := applyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	f := c.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return nil, 0, err
	}
	res, err := fsm.Response(f.Response())
	if err != nil {
		return nil, f.Index(), applyError{err}
	}
	return res, f.Index(), nil
}

// Close leaves the cluster gracefully (the leader removes this node from the Raft
// configuration; a failed node would stay in it), then stops Raft, gossip and the rpc
// port, and returns once the cluster's goroutines have ended. It may be called more than
// once, and before Start.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started
	c.mu.Unlock()

	if started && c.raft != nil && c.ms.ml != nil {
		c.leave()
	}
	c.cancel()
	var errs []error
	if c.grpc != nil {
		c.grpc.Stop()
	}
	if c.peers != nil {
		c.peers.close()
	}
	if c.raft != nil {
		if err := c.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
	}
	if c.trans != nil {
		errs = append(errs, c.trans.Close())
	}
	if c.ms != nil {
		errs = append(errs, c.ms.shutdown())
	}
	if c.mux != nil {
		if err := c.mux.close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	c.wg.Wait()
	c.ret.close() // what the retainer, if it ran, left waiting
	errs = append(errs, c.stores.close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: close: %w", err)
	}
	return nil
}

// leave takes this node out of the Raft configuration and the member list: it tells the
// others it is leaving (metadata), so that the leader removes it rather than keep it as a
// failed member, waits for that (a leader removes itself, handing over), then leaves
// gossip.
func (c *Cluster) leave() {
	c.leaving.Store(true)
	if err := c.ms.update(time.Second); err != nil {
		c.log.Debug("cluster: leave: metadata broadcast", "err", err)
	}
	self := raft.ServerID(c.cfg.NodeName)
	deadline := time.Now().Add(leaveTimeout)
	removing := false
	var leaderless time.Time
	for {
		if _, in := c.suffrage()[string(self)]; !in {
			break
		}
		if c.raft.State() == raft.Leader {
			if c.otherVoters() == 0 {
				break // the last voter: there is no one to hand over to
			}
			if !removing { // the others commit the removal and elect a leader among them
				removing = true
				if err := c.raft.RemoveServer(self, 0, raftChangeTimeout).Error(); err != nil {
					c.log.Warn("cluster: leave: remove this node from the raft configuration", "err", err)
				}
				continue
			}
		}
		if _, ok := c.Leader(); ok {
			leaderless = time.Time{}
		} else if leaderless.IsZero() {
			leaderless = time.Now()
		} else if time.Since(leaderless) > leaveNoLeader {
			c.log.Info("cluster: leave: no leader to remove this node from the raft configuration")
			break
		}
		if time.Now().After(deadline) {
			c.log.Warn("cluster: leave: still in the raft configuration; stopping anyway")
			break
		}
		time.Sleep(50 * time.Millisecond) // polling: Raft has no notice of a configuration change
	}
	if err := c.ms.leave(time.Second); err != nil {
		c.log.Debug("cluster: leave broadcast", "err", err)
	}
	c.log.Info("cluster: left")
}

// otherVoters counts the voters of the configuration other than this node.
func (c *Cluster) otherVoters() int {
	n := 0
	for name, s := range c.suffrage() {
		if name != c.cfg.NodeName && s == "voter" {
			n++
		}
	}
	return n
}
