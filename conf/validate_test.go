package conf

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidate breaks one rule per case, starting from the defaults, and checks the
// error names the field. Cases are named by the broken setting.
func TestValidate(t *testing.T) {
	tlsOK := &TLS{CertFile: "c.pem", KeyFile: "k.pem", MinVersion: "1.2"}
	listen := func(ls ...Listener) func(*Config) {
		return func(c *Config) { c.Listeners = ls }
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" means valid; else the expected "field: message" (a prefix suffices)
	}{
		// limits
		{"limits.auth_failures.max=-1", func(c *Config) { c.Limits.AuthFailures.Max = ptr(-1) },
			`limits.auth_failures.max: -1 is out of range 0..65535`},
		{"limits.auth_failures.max=0", func(c *Config) { c.Limits.AuthFailures.Max = ptr(0) }, ""},
		{"limits.auth_failures.window=-1s", func(c *Config) { c.Limits.AuthFailures.Window = Duration(-time.Second) },
			`limits.auth_failures.window: must be positive, got -1s`},
		{"limits.auth_failures.backoff_max=-1s", func(c *Config) { c.Limits.AuthFailures.BackoffMax = Duration(-time.Second) },
			`limits.auth_failures.backoff_max: must be positive, got -1s`},
		// listeners
		{"listeners[0].type=udp", func(c *Config) { c.Listeners[0].Type = "udp" },
			`listeners[0].type: "udp" is not one of tcp, tls, ws, wss`},
		{"listeners[0].address=localhost", func(c *Config) { c.Listeners[0].Address = "localhost" },
			`listeners[0].address: "localhost" is not host:port: missing port in address`},
		{"listeners[0].address=:99999", func(c *Config) { c.Listeners[0].Address = ":99999" },
			`listeners[0].address: ":99999" is not host:port: port "99999" is not a number in 0..65535`},
		{"listeners[0].address=:mqtt", func(c *Config) { c.Listeners[0].Address = ":mqtt" },
			`listeners[0].address: ":mqtt" is not host:port: port "mqtt"`},
		{"listeners[0].address=:-1", func(c *Config) { c.Listeners[0].Address = ":-1" },
			`listeners[0].address: ":-1" is not host:port`},
		{"listeners[0].address=empty", func(c *Config) { c.Listeners[0].Address = "" },
			`listeners[0].address: "" is not host:port`},
		{"listeners[0].address=:0", func(c *Config) { c.Listeners[0].Address = ":0" }, ""},
		{"listeners[0].address=[::1]:1883", func(c *Config) { c.Listeners[0].Address = "[::1]:1883" }, ""},
		{"listeners[0].address=localhost:65535", func(c *Config) { c.Listeners[0].Address = "localhost:65535" }, ""},
		{"listeners=same address", func(c *Config) { c.Listeners[1].Address = c.Listeners[0].Address },
			`listeners[1].address: "127.0.0.1:1883" is also used by listeners[0]`},
		{"listeners=wildcard and loopback", func(c *Config) { c.Listeners[1].Address = ":1883" },
			`listeners[1].address: ":1883" is also used by listeners[0]`},
		{"listeners=0.0.0.0 and ::", listen(
			Listener{Name: "a", Type: "tcp", Address: "0.0.0.0:1883"},
			Listener{Name: "b", Type: "tcp", Address: "[::]:1883"}),
			`listeners[1].address: "[::]:1883" is also used by listeners[0]`},
		{"listeners=two on port 0", listen(
			Listener{Name: "a", Type: "tcp", Address: "127.0.0.1:0"},
			Listener{Name: "b", Type: "tcp", Address: "127.0.0.1:0"}), ""},
		{"listeners=different hosts, same port", listen(
			Listener{Name: "a", Type: "tcp", Address: "127.0.0.1:1883"},
			Listener{Name: "b", Type: "tcp", Address: "10.0.0.1:1883"}), ""},
		{"http.address=listener's", func(c *Config) { c.HTTP.Address = "127.0.0.1:1883" },
			`http.address: "127.0.0.1:1883" is also used by listeners[0]`},
		{"listeners[1].name=mqtt", func(c *Config) { c.Listeners[1].Name = "mqtt" },
			`listeners[1].name: "mqtt" is also the name of listeners[0]`},
		{"listeners[0].name=empty", func(c *Config) { c.Listeners[0].Name = "" }, `listeners[0].name: required`},
		{"listeners[0].path on tcp", func(c *Config) { c.Listeners[0].Path = "/mqtt" },
			`listeners[0].path: set, but only ws and wss listeners have a path`},
		{"listeners[1].path=mqtt", func(c *Config) { c.Listeners[1].Path = "mqtt" },
			`listeners[1].path: "mqtt" must start with /`},
		{"listeners[1].path=empty", func(c *Config) { c.Listeners[1].Path = "" },
			`listeners[1].path: "" must start with /`},
		{"listeners[0].type=tls without tls", func(c *Config) { c.Listeners[0].Type = "tls" },
			`listeners[0].tls: required for a tls listener`},
		{"listeners[1].type=wss without tls", func(c *Config) { c.Listeners[1].Type = "wss" },
			`listeners[1].tls: required for a wss listener`},
		{"listeners[0].tls on tcp", func(c *Config) { c.Listeners[0].TLS = tlsOK },
			`listeners[0].tls: set, but a tcp listener does not use TLS`},
		{"listeners[1].tls on ws", func(c *Config) { c.Listeners[1].TLS = tlsOK },
			`listeners[1].tls: set, but a ws listener does not use TLS`},
		{"listeners[0].tls.cert_file=empty", listen(
			Listener{Name: "a", Type: "tls", Address: ":8883", TLS: &TLS{KeyFile: "k", MinVersion: "1.2"}}),
			`listeners[0].tls.cert_file: required`},
		{"listeners[0].tls.key_file=empty", listen(
			Listener{Name: "a", Type: "wss", Address: ":443", Path: "/", TLS: &TLS{CertFile: "c", MinVersion: "1.3"}}),
			`listeners[0].tls.key_file: required`},
		{"listeners[0].tls.min_version=1.1", listen(
			Listener{Name: "a", Type: "tls", Address: ":8883", TLS: &TLS{CertFile: "c", KeyFile: "k", MinVersion: "1.1"}}),
			`listeners[0].tls.min_version: "1.1" is not one of 1.2, 1.3`},
		{"listeners[0]=tls ok", listen(Listener{Name: "a", Type: "tls", Address: ":8883", TLS: tlsOK}), ""},
		{"listeners[0].tls.use_identity_as_username without client_ca_file", listen(
			Listener{Name: "a", Type: "tls", Address: ":8883", TLS: &TLS{CertFile: "c", KeyFile: "k", MinVersion: "1.2",
				UseIdentityAsUsername: true}}),
			`listeners[0].tls.use_identity_as_username: needs tls.client_ca_file: without client certificates there is no identity`},
		{"listeners[0].tls.use_identity_as_username with client_ca_file", listen(
			Listener{Name: "a", Type: "wss", Address: ":443", Path: "/", TLS: &TLS{CertFile: "c", KeyFile: "k", MinVersion: "1.3",
				ClientCAFile: "ca", UseIdentityAsUsername: true}}), ""},
		// http
		{"http.address=off", func(c *Config) { c.HTTP.Address = "off" }, ""},
		{"http.address=8080", func(c *Config) { c.HTTP.Address = "8080" },
			`http.address: "8080" is neither host:port nor "off"`},
		{"http.address=OFF", func(c *Config) { c.HTTP.Address = "OFF" },
			`http.address: "OFF" is neither host:port nor "off"`},
		{"http.metrics=closed", func(c *Config) { c.HTTP.Metrics = "closed" },
			`http.metrics: "closed" is not one of open, admin`},
		{"http.metrics=admin without credentials", func(c *Config) { c.HTTP.Metrics = "admin" },
			`http.metrics: admin needs http.admin.users or http.admin.token_file`},
		{"http.metrics=admin with a token file", func(c *Config) { c.HTTP.Metrics, c.HTTP.Admin.TokenFile = "admin", "tokens" }, ""},
		{"http.pprof=on", func(c *Config) { c.HTTP.PProf = "on" },
			`http.pprof: "on" is not one of auto, open, admin, off`},
		{"http.pprof=admin without credentials", func(c *Config) { c.HTTP.PProf = "admin" },
			`http.pprof: admin needs http.admin.users or http.admin.token_file`},
		{"http.pprof=off", func(c *Config) { c.HTTP.PProf = "off" }, ""},
		{"http.allowed_hosts=names", func(c *Config) {
			c.HTTP.AllowedHosts = []string{"broker.example", "Broker.Example:8080", "[fe80::1]:80", "10.0.0.1"}
		}, ""},
		{"http.allowed_hosts[0]=empty", func(c *Config) { c.HTTP.AllowedHosts = []string{""} },
			`http.allowed_hosts[0]: "": empty`},
		{"http.allowed_hosts[1]=url", func(c *Config) { c.HTTP.AllowedHosts = []string{"a", "http://broker.example"} },
			`http.allowed_hosts[1]: "http://broker.example": want a name as a Host header gives it`},
		{"http.allowed_hosts[0]=wildcard", func(c *Config) { c.HTTP.AllowedHosts = []string{"*.example"} },
			`http.allowed_hosts[0]: "*.example": want a name`},
		{"http.allowed_hosts[0]=port 0", func(c *Config) { c.HTTP.AllowedHosts = []string{"broker.example:0"} },
			`http.allowed_hosts[0]: "broker.example:0": port "0" is not a number in 1..65535`},
		{"http.allowed_hosts[0]=port only", func(c *Config) { c.HTTP.AllowedHosts = []string{":8080"} },
			`http.allowed_hosts[0]: ":8080": no name before the port`},
		{"http.allowed_hosts[0]=bare v6", func(c *Config) { c.HTTP.AllowedHosts = []string{"fe80::1"} },
			`http.allowed_hosts[0]: "fe80::1": not a name, nor name:port`},
		// store
		{"store.dir=empty", func(c *Config) { c.Store.Dir = "" }, `store.dir: required`},
		{"store.engine=rocksdb", func(c *Config) { c.Store.Engine = "rocksdb" },
			`store.engine: "rocksdb" is not one of pebble, log`},
		{"store.sync=sometimes", func(c *Config) { c.Store.Sync = "sometimes" },
			`store.sync: "sometimes" is not one of always, interval, none`},
		{"store.sync_interval=0", func(c *Config) { c.Store.SyncInterval = 0 },
			`store.sync_interval: must be positive, got 0s`},
		{"store.sync_interval=-1s", func(c *Config) { c.Store.SyncInterval = Duration(-time.Second) },
			`store.sync_interval: must be positive, got -1s`},
		{"store.cache_size=-1KB", func(c *Config) { c.Store.CacheSize = -1000 },
			`store.cache_size: -1000 must not be negative`},
		{"store.cache_size=auto", func(c *Config) { c.Store.CacheSize = ByteSizeAuto },
			`store.cache_size: "auto" is only allowed for memory.limit`},
		{"store.memtable_size=0", func(c *Config) { c.Store.MemtableSize = 0 },
			`store.memtable_size: 0 is below the minimum of 1B`},
		{"store.memtable_size=4GiB", func(c *Config) { c.Store.MemtableSize = 4 << 30 },
			`store.memtable_size: 4GiB is above the maximum of 4294967295B`},
		// memory
		{"memory.profile=big", func(c *Config) { c.Memory.Profile = "big" },
			`memory.profile: "big" is not one of server, edge`},
		{"memory.limit=4MiB", func(c *Config) { c.Memory.Limit = 4 << 20 },
			`memory.limit: 4MiB is below the minimum of 8MiB`},
		{"memory.limit=8MiB", func(c *Config) { c.Memory.Limit = 8 << 20 }, ""},
		{"memory.limit=-2", func(c *Config) { c.Memory.Limit = -2 }, `memory.limit: -2 must not be negative`},
		{"memory.return_to_os=-1s", func(c *Config) { c.Memory.ReturnToOS = ptr(Duration(-time.Second)) },
			`memory.return_to_os: must not be negative, got -1s`},
		// log
		{"log.level=trace", func(c *Config) { c.Log.Level = "trace" },
			`log.level: "trace" is not one of debug, info, warn, error`},
		{"log.format=xml", func(c *Config) { c.Log.Format = "xml" }, `log.format: "xml" is not one of text, json`},
		// mqtt
		{"mqtt.max_keepalive=65536", func(c *Config) { c.MQTT.MaxKeepalive = 65536 },
			`mqtt.max_keepalive: 65536 is out of range 0..65535`},
		{"mqtt.max_keepalive=-1", func(c *Config) { c.MQTT.MaxKeepalive = -1 },
			`mqtt.max_keepalive: -1 is out of range 0..65535`},
		{"mqtt.receive_maximum=0", func(c *Config) { c.MQTT.ReceiveMaximum = 0 },
			`mqtt.receive_maximum: 0 is out of range 1..65535`},
		{"mqtt.receive_maximum=65536", func(c *Config) { c.MQTT.ReceiveMaximum = 65536 },
			`mqtt.receive_maximum: 65536 is out of range 1..65535`},
		{"mqtt.max_packet_size=15", func(c *Config) { c.MQTT.MaxPacketSize = 15 },
			`mqtt.max_packet_size: 15B is below the minimum of 16B`},
		{"mqtt.max_packet_size=16", func(c *Config) { c.MQTT.MaxPacketSize = 16 }, ""},
		{"mqtt.max_packet_size=268435460", func(c *Config) { c.MQTT.MaxPacketSize = 268435460 }, ""},
		{"mqtt.max_packet_size=268435461", func(c *Config) { c.MQTT.MaxPacketSize = 268435461 },
			`mqtt.max_packet_size: 268435461B is above the maximum of 268435460B`},
		{"mqtt.max_packet_size=-1KiB", func(c *Config) { c.MQTT.MaxPacketSize = -1024 },
			`mqtt.max_packet_size: -1024 must not be negative`},
		{"mqtt.max_packet_size=auto", func(c *Config) { c.MQTT.MaxPacketSize = ByteSizeAuto },
			`mqtt.max_packet_size: "auto" is only allowed for memory.limit`},
		{"mqtt.topic_alias_maximum=65536", func(c *Config) { c.MQTT.TopicAliasMaximum = ptr(65536) },
			`mqtt.topic_alias_maximum: 65536 is out of range 0..65535`},
		{"mqtt.topic_alias_maximum=-1", func(c *Config) { c.MQTT.TopicAliasMaximum = ptr(-1) },
			`mqtt.topic_alias_maximum: -1 is out of range 0..65535`},
		{"mqtt.max_qos=3", func(c *Config) { c.MQTT.MaxQoS = ptr(3) }, `mqtt.max_qos: 3 is out of range 0..2`},
		{"mqtt.max_qos=-1", func(c *Config) { c.MQTT.MaxQoS = ptr(-1) }, `mqtt.max_qos: -1 is out of range 0..2`},
		{"mqtt.max_qos=0", func(c *Config) { c.MQTT.MaxQoS = ptr(0) }, ""},
		{"mqtt.session_expiry_max=-1", func(c *Config) { c.MQTT.SessionExpiryMax = -1 },
			`mqtt.session_expiry_max: -1 is out of range 0..4294967295`},
		{"mqtt.session_expiry_max=4294967296", func(c *Config) { c.MQTT.SessionExpiryMax = 1 << 32 },
			`mqtt.session_expiry_max: 4294967296 is out of range 0..4294967295`},
		{"mqtt.session_expiry_max=4294967295", func(c *Config) { c.MQTT.SessionExpiryMax = 1<<32 - 1 }, ""},
		{"mqtt.connect_timeout=0", func(c *Config) { c.MQTT.ConnectTimeout = 0 },
			`mqtt.connect_timeout: must be positive, got 0s`},
		// queue
		{"queue.online_messages=0", func(c *Config) { c.Queue.OnlineMessages = 0 },
			`queue.online_messages: 0 is out of range 1..2147483647`},
		{"queue.offline_messages=-5", func(c *Config) { c.Queue.OfflineMessages = -5 },
			`queue.offline_messages: -5 is out of range 1..2147483647`},
		{"queue.offline_bytes=-1", func(c *Config) { c.Queue.OfflineBytes = -3 },
			`queue.offline_bytes: -3 must not be negative`},
		{"queue.offline_bytes=auto", func(c *Config) { c.Queue.OfflineBytes = ByteSizeAuto },
			`queue.offline_bytes: "auto" is only allowed for memory.limit`},
		{"queue.expiry_sweep=-1s", func(c *Config) { c.Queue.ExpirySweep = Duration(-time.Second) },
			`queue.expiry_sweep: must be positive, got -1s`},
		{"queue.when_full=block", func(c *Config) { c.Queue.WhenFull = "block" },
			`queue.when_full: "block" is not one of drop, backpressure`},
		{"queue.max_pause=-1s", func(c *Config) { c.Queue.MaxPause = Duration(-time.Second) },
			`queue.max_pause: must be positive, got -1s`},
		// $SYS
		{"sys_interval=0", func(c *Config) { c.SysInterval = ptr(Duration(0)) }, ""},
		{"sys_interval=-1s", func(c *Config) { c.SysInterval = ptr(Duration(-time.Second)) },
			`sys_interval: must not be negative, got -1s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error:\n%v", err)
				}
				return
			}
			var errs *Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Validate() = %v; want *Errors", err)
			}
			if len(errs.List) != 1 {
				t.Fatalf("want exactly one problem, got:\n%v", err)
			}
			if got := errs.List[0].Error(); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestValidateAllAtOnce checks that Validate reports every problem, not the first one.
func TestValidateAllAtOnce(t *testing.T) {
	c := Default()
	c.Listeners[0].Type = "udp"
	c.Store.Sync = "never"
	c.MQTT.MaxQoS = ptr(5)
	c.Log.Level = "loud"
	err := c.Validate()
	want := strings.Join([]string{
		`listeners[0].type: "udp" is not one of tcp, tls, ws, wss`,
		`store.sync: "never" is not one of always, interval, none`,
		`log.level: "loud" is not one of debug, info, warn, error`,
		`mqtt.max_qos: 5 is out of range 0..2`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	var one Error
	if !errors.As(err, &one) || one.Field != "listeners[0].type" {
		t.Fatalf("errors.As(*Error) = %+v; want the first problem", one)
	}
}

// TestValidateZero checks that a config never given its defaults is refused, not
// silently accepted: Validate expects EnsureDefaults to have run.
func TestValidateZero(t *testing.T) {
	err := (&Config{}).Validate()
	for _, field := range []string{"store.dir", "store.sync", "memory.profile", "log.level", "mqtt.receive_maximum", "queue.online_messages"} {
		if err == nil || !strings.Contains(err.Error(), field+":") {
			t.Errorf("zero Config: no error for %s in\n%v", field, err)
		}
	}
}
