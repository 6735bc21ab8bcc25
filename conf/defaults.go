package conf

import (
	"os"
	"time"
)

// DefaultWSPath is where ws and wss listeners serve MQTT unless told otherwise.
const DefaultWSPath = "/mqtt"

// Default returns the server profile: every field set to the value a broker on a
// dedicated host runs with when the file says nothing. It is what an empty file loads to.
func Default() *Config {
	return server()
}

// DefaultEdge returns the edge profile (memory.profile: edge): the server's defaults
// resized for a device with a few hundred MB of RAM shared with other programs, where the
// broker should stay near 15 MB of RSS.
func DefaultEdge() *Config {
	return edge()
}

// base holds the defaults both profiles share. Each comes with the reason for it; a
// default that differs between profiles lives in server and edge instead.
func base() *Config {
	return &Config{
		Listeners: []Listener{
			// Loopback only: the defaults admit anonymous clients, so a fresh install must
			// not be reachable from the network until the operator chooses an address.
			{Name: "mqtt", Type: ListenerTCP, Address: "127.0.0.1:1883"},
			// Browser clients (MQTT.js, Paho JS) connect to /mqtt unless configured otherwise.
			{Name: "ws", Type: ListenerWS, Address: "127.0.0.1:8083", Path: DefaultWSPath},
		},
		// Metrics and pprof reveal internals and pprof costs CPU: loopback until asked.
		// Metrics stay open off loopback, as scrapers expect; pprof there needs the admin
		// credentials (its heap profiles and command line are the process's secrets).
		HTTP: HTTP{Address: "127.0.0.1:8080", Metrics: HTTPOpen, PProf: HTTPAuto},
		Store: Store{
			// Relative to the working directory, like most single-binary servers.
			Dir: "./data",
			// Acknowledged means durable (DESIGN.md, Durability); group commit keeps the
			// fsync per batch rather than per message, so safety is the default on every
			// profile, flash included.
			Sync: SyncAlways,
		},
		Memory: Memory{
			// The cgroup limit, else host memory, is what the kernel enforces; a fixed guess
			// here would be wrong for containers and for programs that embed the broker.
			Limit: ByteSizeAuto,
		},
		// allow_anonymous stays unset: anonymous access is harmless while the listeners
		// serve loopback only and lets a first run work without a password file, and
		// unset it cannot follow a listener onto the network (Config.CheckExposure).
		// A cached login is re-verified after 2 minutes: long enough to absorb a
		// reconnect storm, short enough to bound what a memory dump would give away.
		Auth: Auth{CacheTTL: Duration(2 * time.Minute), ForeignSession: ForeignDiscard},
		Log:  Log{Level: "info", Format: "text"}, // info: lifecycle, not per-packet noise; text: for humans first
		MQTT: MQTT{
			MaxQoS:          ptr(2),    // the whole protocol unless the operator restricts it
			RetainAvailable: ptr(true), // idem
			// Long enough for a slow mobile link to send CONNECT, short enough that sockets
			// which never speak (or speak slowly on purpose) do not pile up.
			ConnectTimeout: Duration(10 * time.Second),
		},
		Limits: limitsDefaults(),
		// An expired message waiting for an offline client is never delivered, so it
		// only takes room: 30s bounds how long, while the sweep (which walks only the
		// sessions holding such messages) stays rare enough to cost nothing.
		// Drop is what a broker has always done, and stays the default. Backpressure waits
		// for a queue that moves: one whose client takes nothing for 10s is stuck, not
		// slow, and its publishers go on rather than wait longer for it.
		Queue: Queue{ExpirySweep: Duration(30 * time.Second), WhenFull: QueueDrop, MaxPause: Duration(10 * time.Second)},
		// As mosquitto's sys_interval: fresh enough for dashboards, cheap to publish.
		SysInterval: ptr(Duration(10 * time.Second)),
	}
}

// server is the profile for a dedicated host, where throughput and latency matter more
// than a few MB of memory.
func server() *Config {
	c := base()
	c.Memory.Profile = ProfileServer
	// Pebble reads and compacts a large state in the background, and keeps memory
	// bounded by its cache whatever the state's size.
	c.Store.Engine, c.Store.EngineDefaulted = EnginePebble, true
	// When sync: interval is chosen, 100ms bounds the loss window to what a client
	// retrying after a crash hardly notices, while fsyncs stay rare.
	c.Store.SyncInterval = Duration(100 * time.Millisecond)
	// Enough block cache to keep retained messages and recent queues in memory.
	c.Store.CacheSize = 64 << 20
	// Large memtables mean fewer, larger flushes and less write amplification.
	c.Store.MemtableSize = 32 << 20
	// A busy server reuses its heap, and the release rule leaves it alone; a server gone
	// quiet after a burst (typically a crowd of idle connections that all connected at
	// once) gives the burst's garbage back at its first quiet check instead of keeping it
	// at GOGC 400's headroom for good. A check is a few metric reads (microseconds); every
	// second, a burst's garbage goes back within about 2s of its end.
	c.Memory.ReturnToOS = ptr(Duration(time.Second))
	// Enough unacknowledged QoS 1/2 messages in flight to fill a fast link, still bounded
	// so one session cannot hold an unbounded inflight window.
	c.MQTT.ReceiveMaximum = 1024
	// A packet is buffered whole before it is handled, so the largest one accepted is
	// what any client can make the broker hold per connection: the protocol's 256 MB
	// would let a few clients take gigabytes. 1 MiB (EMQX's default too) carries
	// telemetry, commands and chunked files; an operator who needs more says so.
	c.MQTT.MaxPacketSize = 1 << 20
	// A topic alias table per connection saves bandwidth for publishers repeating long
	// topics; 64 entries cover typical devices at a small cost per connection.
	c.MQTT.TopicAliasMaximum = ptr(64)
	// An online client drains its queue as fast as the network allows; a few entries
	// absorb bursts, and a slow consumer loses QoS 0 rather than growing the heap
	// (mochi's 8,192-slot channel costs about 64 KiB per client).
	c.Queue.OnlineMessages = 16
	// An offline persistent session keeps what it missed until it returns, within both a
	// count and a byte bound so that a few forgotten sessions cannot fill the disk.
	c.Queue.OfflineMessages = 1000
	c.Queue.OfflineBytes = 16 << 20
	// A million connections is what one server is built to hold; past it the process
	// would be near its file limit anyway.
	c.Limits.MaxConnections = ptr(1_000_000)
	// Enough for a gateway subscribing per device; a client subscribing more is a bug or
	// an attack on the index.
	c.Limits.MaxSubscriptions = ptr(1000)
	// Handshakes wait a round trip for the client: 256 at once keep a storm of
	// reconnecting TLS clients moving faster than a few cores can compute their keys.
	c.Limits.MaxTLSHandshakes = 256
	// A reconnect storm of tens of thousands of clients is answered from the login
	// cache; 65536 entries cost at most about 3 MB.
	c.Auth.CacheSize = ptr(65536)
	return c
}

// edge is the profile for a small device: the server profile's shape, its sizes cut to
// fit a broker of about 15 MB RSS that writes to flash.
func edge() *Config {
	c := base()
	c.Memory.Profile = ProfileEdge
	// The append-only log writes each commit group once, in one write of up to 64 KiB,
	// and holds no memtable or cache; built with -tags bifrost_nopebble the broker links
	// none of Pebble's code. Under the edge load: 5.9-8.1 MiB of VmRSS instead of 12.5-12.7
	// (docs/lab/edge.md). A device's state is small enough to replay at start.
	c.Store.Engine, c.Store.EngineDefaulted = EngineLog, true
	// Flash wears with every fsync: if the operator trades durability for fewer writes
	// (sync: interval), make the writes fewer and larger.
	c.Store.SyncInterval = Duration(time.Second)
	// The broker reads its store only at a restart (one sequential pass, which a cache
	// does not speed up); the OS page cache serves the rest.
	c.Store.CacheSize = 256 << 10
	// Bounds the unflushed write buffer in RAM. Pebble keeps two or three memtables
	// (the one filling, one being flushed, one recycled), and without cgo they live in
	// the Go heap, which the GC lets grow to twice what is live: 1MiB cost 3.4MiB more
	// RSS than 256KiB writing the broker's QoS 1 records in a loop, and left a broker's
	// heap goal 2.4MB higher (docs/benchmarks.md). The WAL, not the flushes, is most of
	// what reaches flash, so smaller memtables add little wear: the loop made Pebble
	// write 18.5MiB with 1MiB memtables, 18.6MiB with 256KiB.
	c.Store.MemtableSize = 256 << 10
	// Memory taken in a spike belongs to the other programs on the device: check often
	// whether to hand it back.
	c.Memory.ReturnToOS = ptr(Duration(30 * time.Second))
	// Each inflight slot holds a message; a device's links are slow anyway.
	c.MQTT.ReceiveMaximum = 64
	// A quarter of the server's: a dozen clients sending their largest packets at once
	// then take about 3 MB of the ~15 MB the broker aims for, rather than 12, and a
	// 1 MiB offline queue still holds four of them. Device traffic is small readings.
	c.MQTT.MaxPacketSize = 256 << 10
	// Fewer clients, smaller tables.
	c.MQTT.TopicAliasMaximum = ptr(16)
	// Half the server's burst room: memory is the scarce resource here.
	c.Queue.OnlineMessages = 8
	// Offline queues live on flash: keep them a tenth of the server's.
	c.Queue.OfflineMessages = 100
	c.Queue.OfflineBytes = 1 << 20
	// A device serves its local clients: tens, not millions.
	c.Limits.MaxConnections = ptr(10_000)
	c.Limits.MaxSubscriptions = ptr(100)
	// A device's few clients reconnect in tens: 32 handshakes at once, under 1 MiB.
	c.Limits.MaxTLSHandshakes = 32
	// A device serves few clients: 1024 entries, at most about 50 KB.
	c.Auth.CacheSize = ptr(1024)
	return c
}

// profile returns the defaults of the named profile. An unknown name gets the server's,
// so that every other field is still filled in and Validate reports only the name.
func profile(name string) *Config {
	if name == ProfileEdge {
		return edge()
	}
	return server()
}

// EnsureDefaults sets every zero field to its default from the profile named by
// memory.profile (server when empty). Pointer fields are defaulted only when nil, so an
// explicit 0 or false in the file stays. It is idempotent.
func (c *Config) EnsureDefaults() {
	orDefault(&c.Memory.Profile, ProfileServer)
	d := profile(c.Memory.Profile)

	if len(c.Listeners) == 0 {
		c.Listeners = d.Listeners
	}
	for i := range c.Listeners {
		c.Listeners[i].ensureDefaults()
	}
	orDefault(&c.HTTP.Address, d.HTTP.Address)
	orDefault(&c.HTTP.Metrics, d.HTTP.Metrics)
	orDefault(&c.HTTP.PProf, d.HTTP.PProf)

	orDefault(&c.Store.Dir, d.Store.Dir)
	if c.Store.Engine == "" {
		c.Store.EngineDefaulted = true
	}
	orDefault(&c.Store.Engine, d.Store.Engine)
	orDefault(&c.Store.Sync, d.Store.Sync)
	orDefault(&c.Store.SyncInterval, d.Store.SyncInterval)
	orDefault(&c.Store.CacheSize, d.Store.CacheSize)
	orDefault(&c.Store.MemtableSize, d.Store.MemtableSize)

	orDefault(&c.Memory.Limit, d.Memory.Limit)
	nilDefault(&c.Memory.ReturnToOS, d.Memory.ReturnToOS)

	c.Auth.ensureDefaults(&d.Auth)
	for i := range c.Listeners {
		if c.Listeners[i].Auth != nil {
			c.Listeners[i].Auth.ensureDefaults(&d.Auth)
		}
	}

	c.Limits.ensureDefaults(&d.Limits)

	orDefault(&c.Log.Level, d.Log.Level)
	orDefault(&c.Log.Format, d.Log.Format)

	orDefault(&c.MQTT.ReceiveMaximum, d.MQTT.ReceiveMaximum)
	orDefault(&c.MQTT.MaxPacketSize, d.MQTT.MaxPacketSize)
	nilDefault(&c.MQTT.TopicAliasMaximum, d.MQTT.TopicAliasMaximum)
	nilDefault(&c.MQTT.MaxQoS, d.MQTT.MaxQoS)
	nilDefault(&c.MQTT.RetainAvailable, d.MQTT.RetainAvailable)
	orDefault(&c.MQTT.ConnectTimeout, d.MQTT.ConnectTimeout)

	orDefault(&c.Queue.OnlineMessages, d.Queue.OnlineMessages)
	orDefault(&c.Queue.OfflineMessages, d.Queue.OfflineMessages)
	orDefault(&c.Queue.OfflineBytes, d.Queue.OfflineBytes)
	orDefault(&c.Queue.ExpirySweep, d.Queue.ExpirySweep)
	orDefault(&c.Queue.WhenFull, d.Queue.WhenFull)
	orDefault(&c.Queue.MaxPause, d.Queue.MaxPause)

	nilDefault(&c.SysInterval, d.SysInterval)

	if c.Cluster != nil { // absent stays absent: no cluster
		c.Cluster.ensureDefaults(c.Store.Dir)
	}
	if len(c.Bridges) > 0 {
		host, _ := os.Hostname()
		for i := range c.Bridges {
			c.Bridges[i].ensureDefaults(host)
		}
	}
}

// ensureDefaults names an unnamed listener type@address (tcp@127.0.0.1:1883), which is
// unique whenever addresses are, gives ws/wss their path and TLS its minimum version.
func (l *Listener) ensureDefaults() {
	orDefault(&l.Name, l.Type+"@"+l.Address)
	if l.Type == ListenerWS || l.Type == ListenerWSS {
		orDefault(&l.Path, DefaultWSPath)
	}
	if l.TLS != nil {
		orDefault(&l.TLS.MinVersion, "1.2") // 1.0 and 1.1 are deprecated (RFC 8996)
	}
}

// orDefault sets *v to d when *v is the zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// nilDefault sets *p to d when *p is nil. d must not be shared: profile returns fresh
// pointers on every call.
func nilDefault[T any](p **T, d *T) {
	if *p == nil {
		*p = d
	}
}

func ptr[T any](v T) *T { return &v }
