package conf

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Cluster makes this node one of several bifrost nodes that act as one broker
// (cluster; docs/cluster.md). Without the block the broker is a single node and starts
// no cluster goroutine, port or state. Every field needs a restart to change.
type Cluster struct {
	// NodeName (cluster.node_name) is this node's name, unique in the cluster: its member
	// name and Raft server id; at most 64 bytes of letters, digits, '-', '_' and '.'.
	// Default the host name: one node per host is the usual deployment.
	NodeName string `yaml:"node_name"`
	// Bind (cluster.bind) is the gossip address (memberlist, TCP and UDP), an IP and a
	// port. Default DefaultClusterBind, 127.0.0.1:7946, memberlist's port on loopback: a
	// fresh install reaches no network until the operator chooses an address, as the
	// MQTT listeners do.
	Bind string `yaml:"bind"`
	// Advertise (cluster.advertise) is the gossip address peers use when it is not Bind
	// (NAT, a wildcard Bind); an IP and a port other than 0. Default "": Bind's.
	Advertise string `yaml:"advertise"`
	// RPC (cluster.rpc) is the node-to-node address: gRPC and Raft share it (one TCP
	// port, told apart by the first byte of each connection). Default DefaultClusterRPC,
	// 127.0.0.1:7947, next to gossip.
	RPC string `yaml:"rpc"`
	// RPCAdvertise (cluster.rpc_advertise) is the RPC address peers dial when it is not
	// RPC; a host and a port other than 0. Default "": RPC's, with a wildcard host
	// replaced by the gossip address's, else by a private IP of the host.
	RPCAdvertise string `yaml:"rpc_advertise"`
	// Seeds (cluster.seeds) are gossip addresses (host:port) of nodes to join. Default
	// none: the node waits for others to join it. Listing every node, this one included,
	// on every node is fine: a node skips its own address.
	Seeds []string `yaml:"seeds"`
	// BootstrapExpect (cluster.bootstrap_expect) is how many nodes without Raft state
	// must see each other before they form a new cluster together; a node with state
	// never bootstraps. 1..1000. Default DefaultClusterExpect, 3, the smallest cluster
	// that survives the loss of a node; a node forms a cluster alone only when this is 1,
	// said explicitly, so that a cold start cannot split.
	BootstrapExpect int `yaml:"bootstrap_expect"`
	// Dir (cluster.dir) holds the Raft log, stable store and snapshots. Default
	// <store.dir>/cluster; required when store.dir is off (Raft must keep its state
	// across restarts).
	Dir string `yaml:"dir"`
	// Secret (cluster.secret) is a key shared by every node: it encrypts gossip
	// (memberlist's keyring) and authenticates and encrypts the RPC port (TLS whose
	// certificate authority is derived from it); a node without it is refused. At least
	// 16 bytes. Default none: only allowed while gossip and RPC are bound to loopback
	// (Config.CheckClusterExposure).
	Secret string `yaml:"secret"`
	// MQTTAdvertise (cluster.mqtt_advertise) is the MQTT address clients are sent to (an
	// MQTT 5 Server Reference) when another node redirects them to this one; a host and
	// a port other than 0. Default "": the first tcp listener's address as bound, with a
	// wildcard host replaced by the advertised RPC address's.
	MQTTAdvertise string `yaml:"mqtt_advertise"`
	// RedirectLoad (cluster.redirect_load) is the load (above 0, at most 1, as /load
	// reports it) above which an MQTT 5 CONNECT is sent to the least loaded node (0x9C,
	// Use another server). Default DefaultClusterRedirectLoad, 0.9: the node still has
	// room for the reconnects of its own clients. 1 never redirects.
	RedirectLoad float64 `yaml:"redirect_load"`
	// Lease (cluster.lease) is how long a node keeps serving clients without hearing from
	// the Raft leader; past it, it closes them and refuses new ones until it is in
	// contact again. At least 1s, Raft's heartbeat timeout. Default DefaultClusterLease,
	// 5s: a follower stops serving at 0.8 of it (4 s) and Raft's elections after a leader
	// dies took 1.3-2.6 s here (docs/cluster-owner.md), so an election does not
	// disconnect the survivors' clients; a cut-off node still lets its clients go
	// elsewhere within seconds. A CONNECT that takes its client id from a node that does
	// not answer waits the lease, so it must leave a second of ClaimTimeout.
	Lease Duration `yaml:"lease"`
	// ClaimTimeout (cluster.claim_timeout) bounds a CONNECT's claim of its client id
	// (docs/cluster-owner.md), below mqtt.connect_timeout, which closes a connection
	// without a CONNACK: the hand-over from the previous owner takes the lease at most (a
	// node that does not answer), so the claim's Raft entry may take the rest,
	// ClaimTimeout - Lease, at least a second, through an election; past that the CONNECT
	// is refused (v5 0x88, Server unavailable; 3.1.1 3). Default
	// DefaultClusterClaimTimeout, 9s: 4 s for the entry with the default lease, as long as
	// a follower serves without a leader, and a second of the connect timeout for the
	// CONNECT to arrive and be authenticated (docs/cluster-owner.md, Timeouts).
	ClaimTimeout Duration `yaml:"claim_timeout"`
}

// Cluster defaults that do not depend on the rest of the configuration.
const (
	DefaultClusterBind         = "127.0.0.1:7946"          // Cluster.Bind
	DefaultClusterRPC          = "127.0.0.1:7947"          // Cluster.RPC
	DefaultClusterExpect       = 3                         // Cluster.BootstrapExpect
	DefaultClusterRedirectLoad = 0.9                       // Cluster.RedirectLoad
	DefaultClusterLease        = Duration(5 * time.Second) // Cluster.Lease
	DefaultClusterClaimTimeout = Duration(9 * time.Second) // Cluster.ClaimTimeout
)

// Limits of the cluster block that Validate enforces, with their reasons.
const (
	// minClusterSecret is the shortest cluster.secret accepted: the keys are derived
	// from it with a fast hash, so a short secret could be guessed offline from a
	// captured packet.
	minClusterSecret = 16
	// minClusterLease is Raft's heartbeat timeout: with a shorter lease a follower would
	// stop serving before Raft itself suspects the leader is gone.
	minClusterLease = Duration(time.Second)
	// maxNodeName bounds node_name, which travels in every gossip message.
	maxNodeName = 64
	// claimGrace is the least claim_timeout must leave beside the lease: the claim's Raft
	// entry's time.
	claimGrace = Duration(time.Second)
)

// ensureDefaults fills the cluster block's zero fields. storeDir is store.dir, already
// defaulted.
func (k *Cluster) ensureDefaults(storeDir string) {
	if k.NodeName == "" {
		k.NodeName, _ = os.Hostname() // left empty when unknown: Validate says so
	}
	orDefault(&k.Bind, DefaultClusterBind)
	orDefault(&k.RPC, DefaultClusterRPC)
	orDefault(&k.BootstrapExpect, DefaultClusterExpect)
	if k.Dir == "" && storeDir != StoreOff && storeDir != "" {
		k.Dir = filepath.Join(storeDir, "cluster")
	}
	orDefault(&k.RedirectLoad, DefaultClusterRedirectLoad)
	orDefault(&k.Lease, DefaultClusterLease)
	orDefault(&k.ClaimTimeout, DefaultClusterClaimTimeout)
}

// clone returns a deep copy of k; nil for nil.
func (k *Cluster) clone() *Cluster {
	if k == nil {
		return nil
	}
	n := *k
	n.Seeds = slices.Clone(k.Seeds)
	return &n
}

// validate reports the cluster block's problems; connectTimeout is mqtt.connect_timeout.
// The addresses' clashes with the listeners' are checked with theirs (validateListeners).
func (k *Cluster) validate(errs *errorList, storeDir string, connectTimeout Duration) {
	switch {
	case k.NodeName == "":
		errs.add("cluster.node_name", "required (the host name is unknown)")
	case len(k.NodeName) > maxNodeName:
		errs.add("cluster.node_name", "%q is longer than %d bytes", k.NodeName, maxNodeName)
	default:
		for _, r := range k.NodeName {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				errs.add("cluster.node_name", "%q may hold only letters, digits, '-', '_' and '.'", k.NodeName)
				break
			}
		}
	}
	// bind and rpc are host:port checked with the listeners' addresses, which they must
	// not share (validateListeners); memberlist also wants bind's host an IP.
	if host, _, err := splitAddress(k.Bind); err == "" && host != "" && net.ParseIP(host) == nil {
		errs.add("cluster.bind", "%q: the host must be an IP address", k.Bind)
	}
	if k.Advertise != "" {
		ipAddress(errs, "cluster.advertise", k.Advertise)
	}
	if k.RPCAdvertise != "" {
		hostPort(errs, "cluster.rpc_advertise", k.RPCAdvertise, true)
	}
	for i, s := range k.Seeds {
		hostPort(errs, fmt.Sprintf("cluster.seeds[%d]", i), s, true)
	}
	between(errs, "cluster.bootstrap_expect", k.BootstrapExpect, 1, 1000)
	if k.Dir == "" {
		if storeDir == StoreOff {
			errs.add("cluster.dir", "required when store.dir is off: Raft keeps its state across restarts")
		} else {
			errs.add("cluster.dir", "required")
		}
	}
	if k.Secret != "" && len(k.Secret) < minClusterSecret {
		errs.add("cluster.secret", "%d bytes; at least %d (e.g. openssl rand -base64 32)", len(k.Secret), minClusterSecret)
	}
	if k.MQTTAdvertise != "" {
		hostPort(errs, "cluster.mqtt_advertise", k.MQTTAdvertise, true)
	}
	if !(k.RedirectLoad > 0 && k.RedirectLoad <= 1) {
		errs.add("cluster.redirect_load", "%g is out of range: above 0, at most 1 (1 never redirects)", k.RedirectLoad)
	}
	if k.Lease < minClusterLease {
		errs.add("cluster.lease", "%s is below the minimum of %s (Raft's heartbeat timeout)", k.Lease, minClusterLease)
	}
	k.validateTimeouts(errs, connectTimeout)
}

// validateTimeouts checks the chain of a CONNECT's timeouts, each below the one that
// bounds it: mqtt.connect_timeout > claim_timeout >= lease + claimGrace
// (docs/cluster-owner.md, Timeouts).
func (k *Cluster) validateTimeouts(errs *errorList, connectTimeout Duration) {
	if k.ClaimTimeout <= 0 {
		errs.add("cluster.claim_timeout", "%s: must be above 0", k.ClaimTimeout)
		return
	}
	if connectTimeout > 0 && k.ClaimTimeout >= connectTimeout {
		errs.add("cluster.claim_timeout", "%s is not below mqtt.connect_timeout (%s): a CONNECT would be closed without a CONNACK before its claim ends",
			k.ClaimTimeout, connectTimeout)
	}
	if k.Lease >= minClusterLease && k.Lease+claimGrace > k.ClaimTimeout {
		errs.add("cluster.lease", "%s and %s for the claim do not fit in cluster.claim_timeout (%s): a CONNECT that takes its client id from a node that does not answer waits the lease",
			k.Lease, claimGrace, k.ClaimTimeout)
	}
}

// hostPort checks addr is host:port; with needPort, port 0 is refused (the address is
// one peers dial).
func hostPort(errs *errorList, field, addr string, needPort bool) bool {
	host, port, err := splitAddress(addr)
	switch {
	case err != "":
		errs.add(field, "%q is not host:port: %s", addr, err)
	case needPort && port == "0":
		errs.add(field, "%q: port 0 cannot be dialled", addr)
	case needPort && host == "":
		errs.add(field, "%q: a host is required", addr)
	default:
		return true
	}
	return false
}

// ipAddress checks addr is ip:port with a port peers can dial, as memberlist takes an
// advertised address (no host names).
func ipAddress(errs *errorList, field, addr string) {
	if !hostPort(errs, field, addr, true) {
		return
	}
	if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host) == nil {
		errs.add(field, "%q: the host must be an IP address", addr)
	}
}

// CheckClusterExposure reports, as *Errors, a cluster block whose gossip or RPC address
// is reachable from the network while it has no secret: anyone who reached those ports
// could join the cluster and act as a node. The broker calls it before starting the
// cluster; Validate does not, so that tests and tools may bind where they like (as
// CheckExposure). nil without a cluster block.
func (c *Config) CheckClusterExposure() error {
	k := c.Cluster
	if k == nil || k.Secret != "" {
		return nil
	}
	var errs errorList
	for _, f := range []struct{ field, addr string }{{"cluster.bind", k.Bind}, {"cluster.rpc", k.RPC}} {
		if !IsLoopback(f.addr) {
			errs.add(f.field, "%q is reachable from the network and the cluster has no secret: set cluster.secret", f.addr)
		}
	}
	return errs.err()
}
