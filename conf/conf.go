// Package conf is bifrost's configuration: the schema of its YAML file, the defaults of
// each memory profile, loading, validation and live reload. A program that embeds the
// broker builds in Go the same Config the file describes.
//
// Each field's doc names its YAML key (listeners[i].address is the address of the i-th
// listener), its default, per memory profile where the profiles differ, and the values it
// accepts. bifrost.example.yaml, at the root of the repository, lists every key set to
// its default.
//
// # Building a Config
//
// A zero field means "use the default", as an absent key does, so a Config names only
// what differs:
//
//	c := &conf.Config{
//		Listeners: []conf.Listener{{Type: conf.ListenerTCP, Address: "127.0.0.1:1884"}},
//		Store:     conf.Store{Dir: conf.StoreOff},
//	}
//	c.EnsureDefaults()
//	if err := c.Validate(); err != nil {
//		// err is an *Errors: every problem, each naming its field
//	}
//
// Default and DefaultEdge return the server and the edge profile with every field set,
// to change in place. EnsureDefaults fills each zero field from the profile that
// Memory.Profile names (server when empty). A pointer field (*int, *bool, *Duration) is
// filled only when nil, so that an explicit 0 or false stays: for those, 0 switches the
// feature off where the field says so. An empty Listeners means the profile's two
// loopback listeners, never none. Validate then reports every remaining problem at once,
// as *Errors naming each field by its YAML key; it judges a Config as EnsureDefaults
// leaves it, so call EnsureDefaults first. bifrost.New does both, on a copy.
//
// Load and Parse read the YAML file: strictly (an unknown key is an error), with the
// defaults filled in and validated, each problem located by line and field.
// LoadOrDefault is Load, or Default when there is no file.
//
// Validate does not judge exposure to the network: CheckExposure refuses a listener that
// would admit anonymous clients from the network, CheckClusterExposure a cluster port
// open to it without a secret. The broker calls both before it serves.
//
// # Reloading
//
// Changes lists the fields that differ between the running Config and the next, each
// marked as applied live or waiting for a restart (docs/admin.md, Live reconfiguration,
// has the table of which are which); Reloadable and Holder.Reload refuse a
// reload that needs one, and Applied is what runs after a reload that leaves such
// changes for the restart. A Holder keeps the running Config as an immutable snapshot,
// swapped atomically; Clone copies one to change.
//
// conf imports nothing of bifrost's, so every other part may depend on it.
//
// Files: conf.go the schema; limits.go, cluster.go and bridge.go the schema of those
// blocks, with their defaults and rules; defaults.go the profiles and EnsureDefaults;
// validate.go the rules; auth.go and http.go the rules of those blocks, and
// CheckExposure with auth's; load.go and index.go reading a file and locating its
// errors; errors.go the error types; size.go and duration.go the value types; reload.go
// live reload; clone.go copies.
package conf

import "time"

// Config is the whole configuration file; its zero value is the server profile's
// defaults once EnsureDefaults has run. The YAML keys are a contract with users and
// tools: add keys, never rename them.
type Config struct {
	// Listeners (listeners) are the network endpoints MQTT clients connect to, each on
	// an address of its own. Empty: the profile's two, tcp on 127.0.0.1:1883 and ws on
	// 127.0.0.1:8083, never none.
	Listeners []Listener `yaml:"listeners"`
	// HTTP (http) is the operator endpoint: metrics, pprof, health, load, the admin API.
	HTTP HTTP `yaml:"http"`
	// Store (store) is the durable store of sessions, queued and retained messages.
	Store Store `yaml:"store"`
	// Memory (memory) chooses the memory profile, which sets every other default, and
	// the soft memory limit.
	Memory Memory `yaml:"memory"`
	// Auth (auth) authenticates and authorizes the clients of every listener that has no
	// auth block of its own.
	Auth Auth `yaml:"auth"`
	// Log (log) configures the logger.
	Log Log `yaml:"log"`
	// MQTT (mqtt) holds the protocol limits told to clients and enforced on them.
	MQTT MQTT `yaml:"mqtt"`
	// Queue (queue) bounds the messages waiting for each session.
	Queue Queue `yaml:"queue"`
	// Limits (limits) bound what clients may take from the broker.
	Limits Limits `yaml:"limits"`
	// SysInterval (sys_interval) is how often the $SYS topics are published. nil: 10s;
	// 0 switches them off; not negative.
	SysInterval *Duration `yaml:"sys_interval"`
	// Cluster (cluster) makes the broker one of several nodes acting as one. nil, the
	// default: a single node.
	Cluster *Cluster `yaml:"cluster"`
	// Bridges (bridges) connect the broker to remote MQTT brokers. Default none.
	Bridges []Bridge `yaml:"bridges"`
}

// Listener types: the values of Listener.Type.
const (
	ListenerTCP = "tcp" // plain MQTT over TCP
	ListenerTLS = "tls" // MQTT over TLS; needs a tls block
	ListenerWS  = "ws"  // MQTT over WebSocket; served at Path
	ListenerWSS = "wss" // MQTT over WebSocket over TLS; needs a tls block
)

// Listener is one network endpoint (listeners[i]); a process may have many, each on its
// own address. An empty listener list means the profile's listeners, never "no
// listeners".
type Listener struct {
	// Name (listeners[i].name) names the listener in logs, metrics and reload reports;
	// unique. Default type@address, e.g. tcp@127.0.0.1:1883.
	Name string `yaml:"name"`
	// Type (listeners[i].type) is the transport: ListenerTCP, ListenerTLS, ListenerWS or
	// ListenerWSS; required.
	Type string `yaml:"type"`
	// Address (listeners[i].address) is the host:port to listen on: ":1883" listens on
	// every interface, port 0 on any free port (tests). Required; no two listeners,
	// nor http.address, cluster.bind or cluster.rpc, may share one.
	Address string `yaml:"address"`
	// Path (listeners[i].path) is where a ws or wss listener serves MQTT; it must start
	// with /, and other types take none. Default DefaultWSPath, /mqtt.
	Path string `yaml:"path"`
	// TLS (listeners[i].tls) is the certificate settings of a tls or wss listener:
	// required for those types, refused for tcp and ws.
	TLS *TLS `yaml:"tls"`
	// MaxConnections (listeners[i].max_connections) caps this listener's open
	// connections, besides the broker's limits.max_connections: 0..2147483647, and 0,
	// the default, leaves only that.
	MaxConnections int `yaml:"max_connections"`
	// Auth (listeners[i].auth) is this listener's own auth block, which replaces the
	// top-level one as a whole. nil, the default: the top-level auth block.
	Auth *Auth `yaml:"auth"`
}

// TLS holds a tls or wss listener's certificate settings (listeners[i].tls). The files
// are PEM; they are re-read when they change (checked every 10s) and on SIGHUP, without
// dropping connections: a file that does not load is logged and the previous
// certificate kept.
type TLS struct {
	// CertFile (listeners[i].tls.cert_file) is the server's certificate chain, leaf
	// first; required.
	CertFile string `yaml:"cert_file"`
	// KeyFile (listeners[i].tls.key_file) is the certificate's private key; required.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile (listeners[i].tls.client_ca_file), when set, makes client certificates
	// required and verifies them against the authorities it holds. Default "": clients
	// are not asked for one.
	ClientCAFile string `yaml:"client_ca_file"`
	// MinVersion (listeners[i].tls.min_version) is the oldest TLS version accepted: "1.2",
	// the default (1.0 and 1.1 are deprecated), or "1.3".
	MinVersion string `yaml:"min_version"`
	// UseIdentityAsUsername (listeners[i].tls.use_identity_as_username, as Mosquitto's
	// use_identity_as_username) makes the verified client certificate the client's
	// identity: its subject's Common Name, or when that is empty its first DNS name, else
	// its first email address, becomes the username, replacing the one in CONNECT (the
	// password is not checked). Needs client_ca_file. Default false.
	UseIdentityAsUsername bool `yaml:"use_identity_as_username"`
}

// HTTPOff is the http.address that disables the operator endpoint, and the http.pprof
// that disables /debug/pprof/.
const HTTPOff = "off"

// Who may use a part of the operator endpoint: the values of HTTP.Metrics and HTTP.PProf
// (which also takes HTTPOff).
const (
	HTTPAuto  = "auto"  // pprof: open on a loopback address; elsewhere the admin credentials, off without them
	HTTPOpen  = "open"  // any request that reaches the endpoint and names it (HTTP.AllowedHosts)
	HTTPAdmin = "admin" // only a request with the admin credentials (HTTP.Admin)
)

// HTTP is the operator endpoint (http): metrics, pprof, health, load, the admin API
// (docs/admin.md). A program that embeds the broker links it with
// import _ "github.com/bifrost-mqtt/bifrost/endpoint", or sets Address to HTTPOff.
type HTTP struct {
	// Address (http.address) is the endpoint's host:port, or HTTPOff to run none.
	// Default 127.0.0.1:8080: what it reveals stays on the host until the operator
	// chooses an address.
	Address string `yaml:"address"`
	// AllowedHosts (http.allowed_hosts) are the names, besides localhost and IP
	// addresses, that a request without admin credentials may give in its Host header:
	// "broker.example" (any port) or "broker.example:8080". Another name is refused
	// (421), as a page of another site would send through DNS rebinding. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// Metrics (http.metrics) is who may read /metrics, /load and /cluster: HTTPOpen, the
	// default, as Prometheus scrapers and load balancers expect, or HTTPAdmin (which
	// needs http.admin's users or token file).
	Metrics string `yaml:"metrics"`
	// PProf (http.pprof) is who may use /debug/pprof/: HTTPAuto, the default (open on a
	// loopback address; elsewhere the admin credentials, and off when there are none),
	// HTTPOpen, HTTPAdmin (which needs http.admin's users or token file) or HTTPOff.
	PProf string `yaml:"pprof"`
	// Admin (http.admin) is who may call the admin API (/api/v1/, docs/admin.md). On a
	// loopback address without users or a token file it is open, as an MQTT listener is
	// to anonymous clients there; off loopback it runs only with one of them.
	Admin Admin `yaml:"admin"`
}

// Admin holds the admin API's credentials (http.admin).
type Admin struct {
	// Users (http.admin.users) are users of auth.password_file who may call the API
	// with HTTP Basic authentication; needs auth.password_file. Default none.
	Users []string `yaml:"users"`
	// TokenFile (http.admin.token_file) holds Bearer tokens, one "name token" per line,
	// the token 16 characters or more; re-read on reload. Default "": none.
	TokenFile string `yaml:"token_file"`
}

// Store sync policies: the values of Store.Sync. They decide when a QoS 1/2 message that
// reaches the store may be acknowledged (docs/durability.md).
const (
	SyncAlways   = "always"   // fsync before the ack, group-committed across connections
	SyncInterval = "interval" // fsync at least every sync_interval; that much may be lost
	SyncNone     = "none"     // leave flushing to the OS; a crash may lose acknowledged messages
)

// Store engines: the values of Store.Engine, what keeps the records on disk
// (docs/durability.md, Engines).
const (
	EnginePebble = "pebble" // an LSM tree (Pebble): reads and compacts large states in the background
	EngineLog    = "log"    // an append-only log replayed at start: no dependency, the least memory
)

// StoreOff is the store.dir that runs the broker without a store: nothing survives a
// restart, and acknowledgements wait for no disk.
const StoreOff = "off"

// Store configures the embedded durable store (store).
type Store struct {
	// Dir (store.dir) is the directory the store keeps its files in, or StoreOff to keep
	// everything in memory. Default ./data, relative to the working directory.
	Dir string `yaml:"dir"`
	// Engine (store.engine) is EnginePebble or EngineLog. Default pebble (edge log); left
	// unset, a Dir another engine wrote opens with that engine (an upgrade whose
	// profile's default changed), and a build without Pebble (-tags bifrost_nopebble)
	// uses log.
	Engine string `yaml:"engine"`
	// EngineDefaulted reports that Engine holds the profile's default, not a choice, so
	// that the store may open with another engine as Engine says. It has no YAML key:
	// EnsureDefaults sets it when Engine is empty, and Default and DefaultEdge return it
	// set, so a program that sets Engine on their result clears it to insist on that
	// engine.
	EngineDefaulted bool `yaml:"-"`
	// Sync (store.sync) is when a write is made durable: SyncAlways, the default,
	// SyncInterval or SyncNone.
	Sync string `yaml:"sync"`
	// SyncInterval (store.sync_interval) is how often sync: interval fsyncs, the most a
	// crash may lose; above 0. Default 100ms (edge 1s).
	SyncInterval Duration `yaml:"sync_interval"`
	// CacheSize (store.cache_size) is the block cache for reads; at least 1 byte.
	// Default 64MiB (edge 256KiB).
	CacheSize ByteSize `yaml:"cache_size"`
	// MemtableSize (store.memtable_size) is how much is written in memory before a
	// flush; at least 1 byte, under 4GiB. Default 32MiB (edge 256KiB).
	MemtableSize ByteSize `yaml:"memtable_size"`
}

// Memory profiles: the values of Memory.Profile. A profile chooses the defaults of every
// other field (Default and DefaultEdge return them); fields set in the file win.
const (
	ProfileServer = "server" // a dedicated host: throughput first
	ProfileEdge   = "edge"   // a small device sharing a few hundred MB: memory first
)

// Memory selects the memory profile and the soft memory limit the GC works to (memory).
type Memory struct {
	// Profile (memory.profile) is ProfileServer, the default, or ProfileEdge; it chooses
	// the default of every other field.
	Profile string `yaml:"profile"`
	// Limit (memory.limit) is the soft memory limit the GC works to: ByteSizeAuto, the
	// default, takes 80% of the cgroup's limit, else half the host's memory (edge a
	// quarter, and at most 64MiB either way); a size is at least 8MiB.
	Limit ByteSize `yaml:"limit"`
	// ReturnToOS (memory.return_to_os) is how often the broker checks whether to hand
	// freed memory back to the OS, with a forced GC when that is worth it; not negative.
	// nil: the profile's default (server 1s, edge 30s); 0 leaves it to the Go runtime's
	// background scavenger.
	ReturnToOS *Duration `yaml:"return_to_os"`
}

// Auth configures authentication and authorization: at the top level (auth) for every
// listener, or in a listener's auth block (listeners[i].auth, with the same keys) for
// that listener alone, where it replaces the top-level block as a whole (as mosquitto's
// per_listener_settings does). conf checks the settings; the broker reads the files.
type Auth struct {
	// AllowAnonymous (auth.allow_anonymous) admits clients that send no username. nil:
	// admitted without a password_file, refused with one; and with neither a
	// password_file nor an explicit true, a listener not bound to loopback must not
	// start (Config.CheckExposure).
	AllowAnonymous *bool `yaml:"allow_anonymous"`
	// PasswordFile (auth.password_file) holds the users and their password hashes, as
	// bifrost passwd writes them; re-read on reload. Default "": no users.
	PasswordFile string `yaml:"password_file"`
	// ACLFile (auth.acl_file) holds topic rules in mosquitto's acl_file syntax; re-read
	// on reload. Default "": every topic allowed to everyone.
	ACLFile string `yaml:"acl_file"`
	// CacheSize (auth.cache_size) is how many successful logins are remembered to spare
	// the password hash: 0..2147483647. nil: 65536 (edge 1024); 0 remembers none.
	CacheSize *int `yaml:"cache_size"`
	// CacheTTL (auth.cache_ttl) is how long a remembered login is trusted before the
	// password is checked again; above 0. Default 2m.
	CacheTTL Duration `yaml:"cache_ttl"`
	// ForeignSession (auth.foreign_session) is what a CONNECT gets when its client id has
	// a session made by another identity (another user name, or another auth block):
	// ForeignDiscard, the default, ends that session and starts a clean one;
	// ForeignRefuse answers CONNACK 0x85 (3.1.1: 2) and leaves the session and its
	// connection alone. No value lets it be inherited.
	ForeignSession string `yaml:"foreign_session"`
	// ClientIDs (auth.client_ids) binds client ids to user names: a CONNECT's client id
	// must match one of these patterns, where %u stands for the user name and a trailing
	// * for any suffix ("%u", "%u-*"), else it is refused (0x85, 3.1.1: 2); see
	// CheckClientIDPattern. Default none: any client id.
	ClientIDs []string `yaml:"client_ids"`
}

// The values of Auth.ForeignSession.
const (
	ForeignDiscard = "discard" // end the other identity's session and start a clean one
	ForeignRefuse  = "refuse"  // refuse the CONNECT, leave the session alone
)

// Log configures the structured logger (log). A program that gives the broker a logger
// of its own (bifrost.WithLogger) leaves it unused.
type Log struct {
	// Level (log.level) is the lowest level logged: debug, info (the default: lifecycle,
	// not per-packet noise), warn or error.
	Level string `yaml:"level"`
	// Format (log.format) is text, the default, or json.
	Format string `yaml:"format"`
}

// MQTT holds protocol limits advertised to clients and enforced by sessions (mqtt).
type MQTT struct {
	// MaxKeepalive (mqtt.max_keepalive) is the longest keep alive an MQTT 5 client may
	// ask for, in seconds; a longer one, or none, is cut to it (Server Keep Alive).
	// 0..65535, and 0, the default, is no cap.
	MaxKeepalive int `yaml:"max_keepalive"`
	// ReceiveMaximum (mqtt.receive_maximum) is how many QoS 1/2 messages each client may
	// have in flight towards the broker: 1..65535. Default 1024 (edge 64).
	ReceiveMaximum int `yaml:"receive_maximum"`
	// MaxPacketSize (mqtt.max_packet_size) is the largest packet accepted, which is what
	// any client can make the broker buffer: 16 bytes up to 268435460, the protocol
	// maximum. Default 1MiB (edge 256KiB).
	MaxPacketSize ByteSize `yaml:"max_packet_size"`
	// TopicAliasMaximum (mqtt.topic_alias_maximum) is how many topic aliases each client
	// may use: 0..65535. nil: 64 (edge 16); 0 disables aliases.
	TopicAliasMaximum *int `yaml:"topic_alias_maximum"`
	// MaxQoS (mqtt.max_qos) is the highest QoS granted: 0..2. nil: 2.
	MaxQoS *int `yaml:"max_qos"`
	// RetainAvailable (mqtt.retain_available) says whether retained messages are
	// supported. nil: true.
	RetainAvailable *bool `yaml:"retain_available"`
	// SessionExpiryMax (mqtt.session_expiry_max) is the longest session expiry granted,
	// in seconds: 0..4294967295, and 0, the default, is no cap.
	SessionExpiryMax int `yaml:"session_expiry_max"`
	// ConnectTimeout (mqtt.connect_timeout) is how long a new connection has to send its
	// CONNECT; above 0. Default 10s.
	ConnectTimeout Duration `yaml:"connect_timeout"`
}

// Queue bounds the messages waiting for one session (queue). Every queue is bounded;
// what overflows is dropped and counted in metrics.
type Queue struct {
	// OnlineMessages (queue.online_messages) sets how much may wait in a connected
	// client's connection, as that many 1 KiB messages (at least 64 KiB): past it QoS 0
	// is shed and QoS 1/2 wait in the session's queue. 1..2147483647; default 16 (edge
	// 8), so 64 KiB.
	OnlineMessages int `yaml:"online_messages"`
	// OfflineMessages (queue.offline_messages) bounds the count of a session's QoS 1/2
	// queue, online (behind its window, or while its connection is backed up) or
	// offline: 1..2147483647. Default 1000 (edge 100).
	OfflineMessages int `yaml:"offline_messages"`
	// OfflineBytes (queue.offline_bytes) bounds the payload bytes of the same queue; at
	// least 1 byte. Default 16MiB (edge 1MiB).
	OfflineBytes ByteSize `yaml:"offline_bytes"`
	// ExpirySweep (queue.expiry_sweep) is how often the messages queued for offline
	// sessions whose Message Expiry Interval has run out are dropped, from memory and
	// from the store; above 0. Default 30s.
	ExpirySweep Duration `yaml:"expiry_sweep"`
	// WhenFull (queue.when_full) says what becomes of a QoS 1/2 message from a client
	// that finds a connected subscriber's queue full: QueueDrop, the default, drops it,
	// counted and logged; QueueBackpressure queues it all the same and stops reading the
	// publisher until the queue has drained to half its bounds (docs/queues.md).
	WhenFull string `yaml:"when_full"`
	// MaxPause (queue.max_pause) bounds backpressure: a full queue whose client takes no
	// message from it for this long stops holding publishers back and drops what finds
	// it full, until it drains to half its bounds. Above 0; default 10s.
	MaxPause Duration `yaml:"max_pause"`
}

// What a full session queue does with a QoS 1/2 message from a client: the values of
// Queue.WhenFull.
const (
	QueueDrop         = "drop"         // drop the message, counted and logged
	QueueBackpressure = "backpressure" // queue it and stop reading the publisher
)

// Duration is a time.Duration written in YAML as a Go duration string ("10s", "250ms").
type Duration time.Duration

// ByteSize is a size in bytes written in YAML as a number or with a unit (512KiB, 64MiB, 1GB).
// Where a field allows it, the word "auto" decodes to ByteSizeAuto.
type ByteSize int64

// ByteSizeAuto marks a size to be derived at run time (memory.limit: auto).
const ByteSizeAuto ByteSize = -1
