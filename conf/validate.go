package conf

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Limits Validate enforces, with their reasons.
const (
	// minMemoryLimit is the lowest memory.limit accepted: below it the GC would run
	// nearly continuously just to hold the runtime's own memory.
	minMemoryLimit ByteSize = 8 << 20
	// minPacketSize is a sane floor for mqtt.max_packet_size: a smaller limit would
	// refuse even a PUBLISH with a short topic and no payload.
	minPacketSize ByteSize = 16
	// maxPacketSize is the protocol maximum: a remaining length of at most 268,435,455
	// bytes plus a fixed header of at most 5 bytes.
	maxPacketSize ByteSize = 268435455 + 5
	// maxMemtableSize is the store engine's limit on a memtable (pebble: under 4GiB).
	maxMemtableSize ByteSize = 4 << 30
)

// Validate reports every problem with c at once, as *Errors naming each field by its YAML
// path. It checks a config as EnsureDefaults leaves it: a zero that EnsureDefaults would
// have replaced is reported as invalid. Validate does not touch the file system.
func (c *Config) Validate() error {
	return c.validate().err()
}

// validate collects the problems without file or line; Parse adds those.
func (c *Config) validate() errorList {
	var errs errorList
	c.validateListeners(&errs)

	if c.HTTP.Address != HTTPOff {
		if _, _, err := splitAddress(c.HTTP.Address); err != "" {
			errs.add("http.address", "%q is neither host:port nor %q: %s", c.HTTP.Address, HTTPOff, err)
		}
	}
	c.HTTP.validate(&errs)
	if len(c.HTTP.Admin.Users) > 0 && c.Auth.PasswordFile == "" {
		errs.add("http.admin.users", "admin users are users of auth.password_file, which is not set")
	}
	for i, u := range c.HTTP.Admin.Users {
		if u == "" {
			errs.add(fmt.Sprintf("http.admin.users[%d]", i), "empty")
		}
	}

	if c.Store.Dir == "" {
		errs.add("store.dir", "required")
	}
	oneOf(&errs, "store.engine", c.Store.Engine, EnginePebble, EngineLog)
	oneOf(&errs, "store.sync", c.Store.Sync, SyncAlways, SyncInterval, SyncNone)
	positive(&errs, "store.sync_interval", c.Store.SyncInterval)
	size(&errs, "store.cache_size", c.Store.CacheSize, 1, math.MaxInt64)
	size(&errs, "store.memtable_size", c.Store.MemtableSize, 1, maxMemtableSize-1)

	oneOf(&errs, "memory.profile", c.Memory.Profile, ProfileServer, ProfileEdge)
	if c.Memory.Limit != ByteSizeAuto {
		size(&errs, "memory.limit", c.Memory.Limit, minMemoryLimit, math.MaxInt64)
	}
	nonNegative(&errs, "memory.return_to_os", c.Memory.ReturnToOS)

	c.Limits.validate(&errs)

	oneOf(&errs, "log.level", c.Log.Level, "debug", "info", "warn", "error")
	oneOf(&errs, "log.format", c.Log.Format, "text", "json")

	m := &c.MQTT
	// The limits below travel as two-byte (or four-byte) integers in CONNACK properties.
	between(&errs, "mqtt.max_keepalive", m.MaxKeepalive, 0, math.MaxUint16)
	between(&errs, "mqtt.receive_maximum", m.ReceiveMaximum, 1, math.MaxUint16) // 0 is a protocol error
	if m.MaxPacketSize != 0 {
		size(&errs, "mqtt.max_packet_size", m.MaxPacketSize, minPacketSize, maxPacketSize)
	}
	if m.TopicAliasMaximum != nil {
		between(&errs, "mqtt.topic_alias_maximum", *m.TopicAliasMaximum, 0, math.MaxUint16)
	}
	if m.MaxQoS != nil {
		between(&errs, "mqtt.max_qos", *m.MaxQoS, 0, 2)
	}
	between(&errs, "mqtt.session_expiry_max", m.SessionExpiryMax, 0, math.MaxUint32)
	positive(&errs, "mqtt.connect_timeout", m.ConnectTimeout)

	between(&errs, "queue.online_messages", c.Queue.OnlineMessages, 1, math.MaxInt32)
	between(&errs, "queue.offline_messages", c.Queue.OfflineMessages, 1, math.MaxInt32)
	size(&errs, "queue.offline_bytes", c.Queue.OfflineBytes, 1, math.MaxInt64)
	positive(&errs, "queue.expiry_sweep", c.Queue.ExpirySweep)
	oneOf(&errs, "queue.when_full", c.Queue.WhenFull, QueueDrop, QueueBackpressure)
	positive(&errs, "queue.max_pause", c.Queue.MaxPause)

	nonNegative(&errs, "sys_interval", c.SysInterval)

	c.validateAuth(&errs)
	if c.Cluster != nil {
		c.Cluster.validate(&errs, c.Store.Dir, c.MQTT.ConnectTimeout)
	}
	c.validateBridges(&errs)
	return errs
}

// validateListeners checks each listener and that no two share a name or an address.
// http.address, cluster.bind and cluster.rpc take part in the address check: they bind
// sockets too.
func (c *Config) validateListeners(errs *errorList) {
	type bound struct {
		owner      string // listeners[i] or http
		host, port string
	}
	var addrs []bound
	use := func(owner, field, addr string) {
		host, port, err := splitAddress(addr)
		if err != "" {
			errs.add(field, "%q is not host:port: %s", addr, err)
			return
		}
		for _, b := range addrs {
			if port != "0" && b.port == port && (b.host == host || isWildcard(b.host) || isWildcard(host)) {
				errs.add(field, "%q is also used by %s", addr, b.owner)
				return
			}
		}
		addrs = append(addrs, bound{owner, host, port})
	}
	names := map[string]int{}
	for i, l := range c.Listeners {
		at := fmt.Sprintf("listeners[%d]", i)
		use(at, at+".address", l.Address)
		if j, ok := names[l.Name]; ok {
			errs.add(at+".name", "%q is also the name of listeners[%d]", l.Name, j)
		} else {
			names[l.Name] = i
		}
		if l.Name == "" {
			errs.add(at+".name", "required")
		}

		// Which path and TLS settings are right depends on the type: with an unknown
		// type, report only that.
		if !oneOf(errs, at+".type", l.Type, ListenerTCP, ListenerTLS, ListenerWS, ListenerWSS) {
			continue
		}
		web := l.Type == ListenerWS || l.Type == ListenerWSS
		between(errs, at+".max_connections", l.MaxConnections, 0, 1<<31-1)
		secure := l.Type == ListenerTLS || l.Type == ListenerWSS
		switch {
		case !web && l.Path != "":
			errs.add(at+".path", "set, but only ws and wss listeners have a path")
		case web && !strings.HasPrefix(l.Path, "/"):
			errs.add(at+".path", "%q must start with /", l.Path)
		}
		switch {
		case secure && l.TLS == nil:
			errs.add(at+".tls", "required for a %s listener", l.Type)
		case !secure && l.TLS != nil:
			errs.add(at+".tls", "set, but a %s listener does not use TLS", l.Type)
		case l.TLS != nil:
			if l.TLS.CertFile == "" {
				errs.add(at+".tls.cert_file", "required")
			}
			if l.TLS.KeyFile == "" {
				errs.add(at+".tls.key_file", "required")
			}
			oneOf(errs, at+".tls.min_version", l.TLS.MinVersion, "1.2", "1.3")
			if l.TLS.UseIdentityAsUsername && l.TLS.ClientCAFile == "" {
				errs.add(at+".tls.use_identity_as_username",
					"needs tls.client_ca_file: without client certificates there is no identity")
			}
		}
	}
	if c.HTTP.Address != HTTPOff {
		if _, _, err := splitAddress(c.HTTP.Address); err == "" {
			use("http", "http.address", c.HTTP.Address)
		}
	}
	if k := c.Cluster; k != nil {
		// Gossip binds UDP as well, but a TCP clash is what matters in practice.
		use("cluster.bind", "cluster.bind", k.Bind)
		use("cluster.rpc", "cluster.rpc", k.RPC)
	}
}

// splitAddress splits host:port and checks the port is a number in 0..65535 (0: any free
// port). The host may be empty (all interfaces), an IP or a name. err is "" when valid.
func splitAddress(addr string) (host, port, err string) {
	host, port, e := net.SplitHostPort(addr)
	if e != nil {
		if ae, ok := e.(*net.AddrError); ok {
			return "", "", ae.Err
		}
		return "", "", e.Error()
	}
	n, e := strconv.ParseUint(port, 10, 16)
	if e != nil {
		return "", "", fmt.Sprintf("port %q is not a number in 0..65535", port)
	}
	return host, strconv.FormatUint(n, 10), ""
}

// isWildcard reports whether host binds every interface, and so clashes with any other
// host on the same port.
func isWildcard(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::"
}

// oneOf checks v is one of allowed and reports whether it is.
func oneOf(errs *errorList, field, v string, allowed ...string) bool {
	if !slices.Contains(allowed, v) {
		errs.add(field, "%q is not one of %s", v, strings.Join(allowed, ", "))
		return false
	}
	return true
}

func between(errs *errorList, field string, v int, lo, hi int64) {
	if int64(v) < lo || int64(v) > hi {
		errs.add(field, "%d is out of range %d..%d", v, lo, hi)
	}
}

// size checks a size is in lo..hi; "auto" is reported as such, since ParseByteSize
// accepts it for every size field and only memory.limit allows it.
func size(errs *errorList, field string, v, lo, hi ByteSize) {
	switch {
	case v == ByteSizeAuto:
		errs.add(field, `"auto" is only allowed for memory.limit`)
	case v < 0:
		errs.add(field, "%d must not be negative", v)
	case v < lo:
		errs.add(field, "%s is below the minimum of %s", v, lo)
	case v > hi:
		errs.add(field, "%s is above the maximum of %s", v, hi)
	}
}

func positive(errs *errorList, field string, d Duration) {
	if d <= 0 {
		errs.add(field, "must be positive, got %s", d)
	}
}

// nonNegative checks an optional duration: nil or 0 (off) or more.
func nonNegative(errs *errorList, field string, d *Duration) {
	if d != nil && *d < 0 {
		errs.add(field, "must not be negative, got %s", *d)
	}
}
