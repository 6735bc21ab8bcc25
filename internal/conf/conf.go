// Package conf is bifrost's configuration: the schema of the one YAML file, its defaults
// (derived per profile), loading, validation and live reload.
//
// Zero means "use the default" for every field: EnsureDefaults fills the gaps from the
// chosen memory profile and Validate reports every remaining problem at once, each naming
// its field (and the file line where the YAML gives one). conf imports nothing of bifrost's,
// so every other part may depend on it.
//
// Files: conf.go the schema; defaults.go the profiles and EnsureDefaults; validate.go the
// rules; load.go and index.go reading a file and locating its errors; errors.go the error
// types; size.go and duration.go the value types; reload.go live reload; clone.go copies; cluster.go the cluster block; bridge.go the bridges.
package conf

import "time"

// Config is the whole configuration file. The YAML keys are a contract with users and
// tools: add keys, never rename them.
type Config struct {
	Listeners   []Listener `yaml:"listeners"`
	HTTP        HTTP       `yaml:"http"`
	Store       Store      `yaml:"store"`
	Memory      Memory     `yaml:"memory"`
	Auth        Auth       `yaml:"auth"`
	Log         Log        `yaml:"log"`
	MQTT        MQTT       `yaml:"mqtt"`
	Queue       Queue      `yaml:"queue"`
	Limits      Limits     `yaml:"limits"`
	SysInterval *Duration  `yaml:"sys_interval"` // $SYS publication interval; nil: 10s; 0 disables
	Cluster     *Cluster   `yaml:"cluster"`      // nil: a single node (cluster.go)
	Bridges     []Bridge   `yaml:"bridges"`      // connections to remote brokers (bridge.go)
}

// Listener types: the values of Listener.Type.
const (
	ListenerTCP = "tcp" // plain MQTT over TCP
	ListenerTLS = "tls" // MQTT over TLS; needs a tls block
	ListenerWS  = "ws"  // MQTT over WebSocket; served at Path
	ListenerWSS = "wss" // MQTT over WebSocket over TLS; needs a tls block
)

// Listener is one network endpoint; a process may have many, each on its own port.
// An empty listener list means the profile's listeners, never "no listeners".
type Listener struct {
	Name    string `yaml:"name"`    // for logs and metrics; default type@address, e.g. tcp@:1883
	Type    string `yaml:"type"`    // tcp | tls | ws | wss
	Address string `yaml:"address"` // host:port; port 0 picks a free port (tests)
	Path    string `yaml:"path"`    // ws/wss only; default /mqtt
	TLS     *TLS   `yaml:"tls"`     // tls/wss only
	// MaxConnections caps this listener's open connections, besides the broker's
	// limits.max_connections; 0 = only that.
	MaxConnections int   `yaml:"max_connections"`
	Auth           *Auth `yaml:"auth"` // nil: the top-level auth block
}

// TLS holds a tls or wss listener's certificate settings. The files are PEM; they are
// re-read when they change (checked every 10s) and on SIGHUP, without dropping
// connections: a file that does not load is logged and the previous certificate kept.
type TLS struct {
	CertFile     string `yaml:"cert_file"`      // the server's certificate chain, leaf first
	KeyFile      string `yaml:"key_file"`       // its private key
	ClientCAFile string `yaml:"client_ca_file"` // set: client certificates required and verified against it
	MinVersion   string `yaml:"min_version"`    // "1.2" (default) or "1.3"
	// UseIdentityAsUsername (Mosquitto's use_identity_as_username) makes the verified
	// client certificate the client's identity: its subject's Common Name, or when that
	// is empty its first DNS name, else its first email address, becomes the username,
	// replacing the one in CONNECT (the password is not checked). Needs client_ca_file.
	// Default false.
	UseIdentityAsUsername bool `yaml:"use_identity_as_username"`
}

// HTTPOff is the http.address that disables the operator endpoint.
const HTTPOff = "off"

// Who may use a part of the operator endpoint: the values of HTTP.Metrics and HTTP.PProf
// (which also takes HTTPOff).
const (
	HTTPAuto  = "auto"  // pprof: open on a loopback address; elsewhere the admin credentials, off without them
	HTTPOpen  = "open"  // any request that reaches the endpoint and names it (HTTP.AllowedHosts)
	HTTPAdmin = "admin" // only a request with the admin credentials (http.admin)
)

// HTTP is the operator endpoint: metrics, pprof, health, load, the admin API.
type HTTP struct {
	Address string `yaml:"address"` // default 127.0.0.1:8080; "off" disables
	// AllowedHosts are the names, besides localhost and IP addresses, that a request
	// without admin credentials may give in its Host header: "broker.example" (any
	// port) or "broker.example:8080". Another name is refused (421), as a page of
	// another site would send through DNS rebinding. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// Metrics is who may read /metrics, /load and /cluster: open (default, as
	// Prometheus scrapers and load balancers expect) or admin.
	Metrics string `yaml:"metrics"`
	// PProf is who may use /debug/pprof/: auto (default: open on a loopback address;
	// elsewhere the admin credentials, and off when there are none), open, admin or off.
	PProf string `yaml:"pprof"`
	// Admin is who may call the admin API (/api/v1/, internal/admin). On a loopback
	// address without users or a token file it is open, as an MQTT listener is to
	// anonymous clients there; off loopback it runs only with one of them.
	Admin Admin `yaml:"admin"`
}

// Admin configures the admin API's credentials.
type Admin struct {
	// Users are users of auth.password_file who may call the API (HTTP Basic).
	Users []string `yaml:"users"`
	// TokenFile holds Bearer tokens, one "name token" per line (16 characters or more);
	// re-read on reload.
	TokenFile string `yaml:"token_file"`
}

// Store sync policies: the values of Store.Sync. They decide when a QoS 1/2 message that
// reaches the store may be acknowledged (DESIGN.md, Durability).
const (
	SyncAlways   = "always"   // fsync before the ack, group-committed across connections
	SyncInterval = "interval" // fsync at least every sync_interval; that much may be lost
	SyncNone     = "none"     // leave flushing to the OS; a crash may lose acknowledged messages
)

// Store engines: the values of Store.Engine, what keeps the records on disk
// (internal/store, docs/durability.md).
const (
	EnginePebble = "pebble" // an LSM tree (Pebble): reads and compacts large states in the background
	EngineLog    = "log"    // an append-only log replayed at start: no dependency, the least memory
)

// StoreOff is the store.dir that runs the broker without a store: nothing survives a
// restart, and acknowledgements wait for no disk.
const StoreOff = "off"

// Store configures the embedded durable store.
type Store struct {
	Dir    string `yaml:"dir"`    // default ./data; "off" keeps everything in memory
	Engine string `yaml:"engine"` // pebble | log; default pebble (edge log), or the engine that wrote dir
	// EngineDefaulted: the file set no engine, so a directory another engine wrote is
	// opened with that one (an upgrade whose profile's default changed); set by
	// EnsureDefaults.
	EngineDefaulted bool     `yaml:"-"`
	Sync            string   `yaml:"sync"`          // always | interval | none; default always
	SyncInterval    Duration `yaml:"sync_interval"` // with sync: interval; default 100ms (edge 1s)
	CacheSize       ByteSize `yaml:"cache_size"`    // block cache for reads; default 64MiB (edge 256KiB)
	MemtableSize    ByteSize `yaml:"memtable_size"` // writes buffered before a flush; default 32MiB (edge 256KiB)
}

// Memory profiles: the values of Memory.Profile. A profile chooses the defaults of every
// other field (see defaults.go); fields set in the file win.
const (
	ProfileServer = "server" // a dedicated host: throughput first
	ProfileEdge   = "edge"   // a small device sharing a few hundred MB: memory first
)

// Memory selects the memory profile and the soft memory limit the GC works to.
type Memory struct {
	Profile string   `yaml:"profile"` // server (default) | edge
	Limit   ByteSize `yaml:"limit"`   // "auto" (cgroup or host memory) or a size such as 512MiB
	// ReturnToOS is how often the broker checks whether to hand freed memory back to the OS
	// (the memory package decides whether it is worth a forced GC). nil: the profile's
	// default (server 1s, edge 30s); 0 leaves it to the Go runtime's background scavenger.
	ReturnToOS *Duration `yaml:"return_to_os"`
}

// Auth configures authentication and authorization: at the top level for every
// listener, or in a listener's auth block for that listener alone, where it replaces the
// top-level block as a whole (as mosquitto's per_listener_settings does). conf checks the
// settings; the auth package reads the files.
type Auth struct {
	// AllowAnonymous admits clients that send no username. nil: admitted without a
	// password_file, refused with one; and with neither a password_file nor an explicit
	// true, a listener not bound to loopback must not start (Config.CheckExposure).
	AllowAnonymous *bool    `yaml:"allow_anonymous"`
	PasswordFile   string   `yaml:"password_file"` // users and password hashes (bifrost passwd)
	ACLFile        string   `yaml:"acl_file"`      // topic rules in mosquitto's acl_file syntax; none: all allowed
	CacheSize      *int     `yaml:"cache_size"`    // logins remembered to spare the hash; nil: 65536 (edge 1024); 0 disables
	CacheTTL       Duration `yaml:"cache_ttl"`     // how long a login is remembered; default 2m
	// ForeignSession is what a CONNECT gets when its client id has a session made by
	// another identity (another user name, or another auth block): discard (the default)
	// ends that session and starts a clean one; refuse answers CONNACK 0x85 (3.1.1: 2)
	// and leaves the session and its connection alone. No value lets it be inherited.
	ForeignSession string `yaml:"foreign_session"`
	// ClientIDs binds client ids to user names: a CONNECT's client id must match one of
	// these patterns, where %u stands for the user name and a trailing * for any suffix
	// ("%u", "%u-*"), else it is refused (0x85, 3.1.1: 2). Empty: any client id.
	ClientIDs []string `yaml:"client_ids"`
}

// The values of Auth.ForeignSession.
const (
	ForeignDiscard = "discard"
	ForeignRefuse  = "refuse"
)

// Log configures the structured logger.
type Log struct {
	Level  string `yaml:"level"`  // debug | info (default) | warn | error
	Format string `yaml:"format"` // text (default) | json
}

// MQTT holds protocol limits advertised to clients and enforced by sessions.
type MQTT struct {
	MaxKeepalive      int      `yaml:"max_keepalive"`       // seconds; 0 = no cap
	ReceiveMaximum    int      `yaml:"receive_maximum"`     // default 1024 (edge 64)
	MaxPacketSize     ByteSize `yaml:"max_packet_size"`     // default 1MiB (edge 256KiB); at most 268435460, the protocol maximum
	TopicAliasMaximum *int     `yaml:"topic_alias_maximum"` // nil: 64 (edge 16); 0 disables aliases
	MaxQoS            *int     `yaml:"max_qos"`             // nil: 2
	RetainAvailable   *bool    `yaml:"retain_available"`    // nil: true
	SessionExpiryMax  int      `yaml:"session_expiry_max"`  // seconds; 0 = no cap
	ConnectTimeout    Duration `yaml:"connect_timeout"`     // default 10s
}

// Queue bounds the messages waiting for one session. Every queue is bounded; what
// overflows is dropped and counted in metrics.
type Queue struct {
	// OnlineMessages sets how much may wait in a connected client's connection, as that
	// many 1 KiB messages (at least 64 KiB): past it QoS 0 is shed and QoS 1/2 wait in the
	// session's queue. Default 16 (edge 8), so 64 KiB.
	OnlineMessages int `yaml:"online_messages"`
	// OfflineMessages and OfflineBytes bound a session's QoS 1/2 queue, online (behind its
	// window, or while its connection is backed up) or offline. Default 1000 and 16MiB
	// of payload (edge 100 and 1MiB).
	OfflineMessages int      `yaml:"offline_messages"`
	OfflineBytes    ByteSize `yaml:"offline_bytes"`
	// ExpirySweep is how often the messages queued for offline sessions whose Message
	// Expiry Interval has run out are dropped, from memory and from the store; default 30s.
	ExpirySweep Duration `yaml:"expiry_sweep"`
	// WhenFull says what becomes of a QoS 1/2 message from a client that finds a connected
	// subscriber's queue full: QueueDrop (default) drops it, counted and logged;
	// QueueBackpressure queues it all the same and stops reading the publisher until the
	// queue has drained to half its bounds (docs/queues.md).
	WhenFull string `yaml:"when_full"`
	// MaxPause bounds backpressure: a full queue whose client takes no message from it for
	// this long stops holding publishers back and drops what finds it full, until it
	// drains to half its bounds. Default 10s.
	MaxPause Duration `yaml:"max_pause"`
}

// What a full session queue does with a QoS 1/2 message from a client: the values of
// Queue.WhenFull.
const (
	QueueDrop         = "drop"
	QueueBackpressure = "backpressure"
)

// Duration is a time.Duration written in YAML as a Go duration string ("10s", "250ms").
type Duration time.Duration

// ByteSize is a size in bytes written in YAML as a number or with a unit (512KiB, 64MiB, 1GB).
// Where a field allows it, the word "auto" decodes to ByteSizeAuto.
type ByteSize int64

// ByteSizeAuto marks a size to be derived at run time (memory.limit: auto).
const ByteSizeAuto ByteSize = -1
