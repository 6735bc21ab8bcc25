package bifrost

import (
	"github.com/bifrost-mqtt/bifrost/conf"
)

// The configuration, re-exported by alias so that a program embedding the broker builds in
// Go whatever the YAML file can say: listeners of every type with their TLS and auth
// blocks, the store, limits, and the rest. Each is the type of package conf
// (github.com/bifrost-mqtt/bifrost/conf), where every field is documented with its YAML
// key, its default and its range: `go doc github.com/bifrost-mqtt/bifrost/conf.Listener`
// shows a listener's. A zero field takes the default, as an absent key does
// (bifrost.example.yaml lists them all).
type (
	// Config is the whole configuration, the schema of the YAML file.
	Config = conf.Config
	// Listener is one network endpoint (listeners[i]); Type is one of ListenerTCP,
	// ListenerTLS, ListenerWS, ListenerWSS.
	Listener = conf.Listener
	// TLS is a tls or wss listener's certificate files (listeners[i].tls).
	TLS = conf.TLS
	// Auth is an auth block: password file, ACL file, anonymous clients (auth, or
	// listeners[i].auth for one listener). HashPassword makes a password file's records.
	Auth = conf.Auth
	// HTTP is the operator endpoint: metrics, pprof, health, load, admin API (http);
	// served by programs that import github.com/bifrost-mqtt/bifrost/endpoint.
	HTTP = conf.HTTP
	// Store is the durable store (store).
	Store = conf.Store
	// Memory is the memory profile and limit (memory).
	Memory = conf.Memory
	// Log is the logger's level and format (log), used when New is given no WithLogger.
	Log = conf.Log
	// MQTT holds the protocol limits told to clients (mqtt).
	MQTT = conf.MQTT
	// Queue bounds the messages waiting for one session (queue).
	Queue = conf.Queue
	// Limits bound what clients may take from the broker (limits).
	Limits = conf.Limits
	// Cluster makes the broker one node of several acting as one (cluster); nil, the
	// default, is a single node.
	Cluster = conf.Cluster
	// Bridge connects the broker to a remote MQTT broker (bridges[i]), as Mosquitto's
	// bridges do (docs/bridges.md); BridgeTopic is one of its topic lines, BridgeTLS its
	// TLS settings.
	Bridge      = conf.Bridge
	BridgeTopic = conf.BridgeTopic
	BridgeTLS   = conf.BridgeTLS
	// Duration is a time.Duration that YAML writes as "10s".
	Duration = conf.Duration
	// ByteSize is a size in bytes that YAML writes as 64MiB.
	ByteSize = conf.ByteSize
	// ConfigErrors is every problem New, LoadConfig or ParseConfig found in a
	// configuration; each is a ConfigError naming its field (and line, from a file).
	ConfigErrors = conf.Errors
	// ConfigError is one problem of a configuration.
	ConfigError = conf.Error
	// ConfigChange is one field a reconfiguration changed, or left for a restart: its YAML
	// path, old and new value (secrets masked), and why it waits for a restart if it does.
	ConfigChange = conf.Change
)

// The values of the configuration's enumerated fields.
const (
	ListenerTCP = conf.ListenerTCP // MQTT over TCP
	ListenerTLS = conf.ListenerTLS // MQTT over TLS; needs a TLS block
	ListenerWS  = conf.ListenerWS  // MQTT over WebSocket, served at Listener.Path
	ListenerWSS = conf.ListenerWSS // MQTT over WebSocket over TLS; needs a TLS block

	HTTPOff   = conf.HTTPOff   // HTTP.Address: no operator endpoint; HTTP.PProf: no /debug/pprof/
	HTTPAuto  = conf.HTTPAuto  // HTTP.PProf: open on loopback, else the admin credentials (default)
	HTTPOpen  = conf.HTTPOpen  // HTTP.Metrics (default), HTTP.PProf: any request that names the endpoint
	HTTPAdmin = conf.HTTPAdmin // HTTP.Metrics, HTTP.PProf: only with the admin credentials

	StoreOff = conf.StoreOff // Store.Dir: no store, nothing kept across restarts

	SyncAlways   = conf.SyncAlways   // Store.Sync: fsync before acknowledging (default)
	SyncInterval = conf.SyncInterval // Store.Sync: fsync every Store.SyncInterval
	SyncNone     = conf.SyncNone     // Store.Sync: leave flushing to the OS

	ProfileServer = conf.ProfileServer // Memory.Profile: a dedicated host (default)
	ProfileEdge   = conf.ProfileEdge   // Memory.Profile: a small device, memory first

	ByteSizeAuto = conf.ByteSizeAuto // Memory.Limit: from the cgroup or the host's memory

	BridgeIn   = conf.BridgeIn   // BridgeTopic.Direction: from the remote to here
	BridgeOut  = conf.BridgeOut  // BridgeTopic.Direction: from here to the remote (default)
	BridgeBoth = conf.BridgeBoth // BridgeTopic.Direction: both ways
	BridgeV5   = conf.BridgeV5   // Bridge.Protocol: MQTT 5.0 (default)
	BridgeV311 = conf.BridgeV311 // Bridge.Protocol: MQTT 3.1.1

	BridgeDropNew    = conf.BridgeDropNew    // Bridge.QueueFull: a full queue drops the new message (default)
	BridgeDropOldest = conf.BridgeDropOldest // Bridge.QueueFull: a full queue drops its oldest waiting message
)

// DefaultConfig returns the server profile's defaults, the configuration New uses when
// given nil; change fields on it before passing it to New.
func DefaultConfig() *Config { return conf.Default() }

// DefaultEdgeConfig returns the edge profile's defaults: a small device that shares a few
// hundred MB with other programs.
func DefaultEdgeConfig() *Config { return conf.DefaultEdge() }

// LoadConfig reads the YAML configuration file at path, as the bifrost command does: unknown
// keys are errors, zero fields take the defaults, and every problem comes back at once as
// ConfigErrors, each with its line and field.
func LoadConfig(path string) (*Config, error) { return conf.Load(path) }

// ParseConfig decodes a YAML configuration held in memory, as LoadConfig does a file.
func ParseConfig(yaml []byte) (*Config, error) { return conf.Parse(yaml, "") }
