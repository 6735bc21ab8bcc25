package conf

import (
	"reflect"
	"testing"
	"time"
)

func TestDefaultServer(t *testing.T) {
	c := Default()
	want := &Config{
		Listeners: []Listener{
			{Name: "mqtt", Type: "tcp", Address: "127.0.0.1:1883"},
			{Name: "ws", Type: "ws", Address: "127.0.0.1:8083", Path: "/mqtt"},
		},
		HTTP: HTTP{Address: "127.0.0.1:8080", Metrics: "open", PProf: "auto"},
		Store: Store{Dir: "./data", Engine: "pebble", EngineDefaulted: true, Sync: "always", SyncInterval: Duration(100 * time.Millisecond),
			CacheSize: 64 << 20, MemtableSize: 32 << 20},
		Memory: Memory{Profile: "server", Limit: ByteSizeAuto, ReturnToOS: ptr(Duration(time.Second))},
		Auth:   Auth{CacheSize: ptr(65536), CacheTTL: Duration(2 * time.Minute), ForeignSession: ForeignDiscard},
		Log:    Log{Level: "info", Format: "text"},
		MQTT: MQTT{ReceiveMaximum: 1024, MaxPacketSize: 1 << 20, TopicAliasMaximum: ptr(64), MaxQoS: ptr(2),
			RetainAvailable: ptr(true), ConnectTimeout: Duration(10 * time.Second)},
		Queue: Queue{OnlineMessages: 16, OfflineMessages: 1000, OfflineBytes: 16 << 20,
			ExpirySweep: Duration(30 * time.Second), WhenFull: QueueDrop, MaxPause: Duration(10 * time.Second)},
		Limits: Limits{MaxConnections: ptr(1_000_000), ConnectRate: ptr(100), ConnectBurst: 500,
			MaxTopicLength: 4096, MaxTopicLevels: 128, MaxSubscriptions: ptr(1000), MaxTLSHandshakes: 256,
			AuthFailures: AuthFailures{Max: ptr(5), Window: Duration(time.Minute), BackoffMax: Duration(30 * time.Second),
				ExemptLoopback: ptr(true)}},
		SysInterval: ptr(Duration(10 * time.Second)),
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Default() =\n%+v\nwant\n%+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Default() is invalid:\n%v", err)
	}
}

func TestDefaultEdge(t *testing.T) {
	c := DefaultEdge()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultEdge() is invalid:\n%v", err)
	}
	// The edge profile is the server's with these fields resized.
	want := Default()
	want.Memory.Profile = "edge"
	want.Store.Engine = "log"
	want.Store.SyncInterval = Duration(time.Second)
	want.Store.CacheSize = 256 << 10
	want.Store.MemtableSize = 256 << 10
	want.Memory.ReturnToOS = ptr(Duration(30 * time.Second))
	want.MQTT.ReceiveMaximum = 64
	want.MQTT.MaxPacketSize = 256 << 10
	want.MQTT.TopicAliasMaximum = ptr(16)
	want.Queue = Queue{OnlineMessages: 8, OfflineMessages: 100, OfflineBytes: 1 << 20,
		ExpirySweep: Duration(30 * time.Second), WhenFull: QueueDrop, MaxPause: Duration(10 * time.Second)}
	want.Auth.CacheSize = ptr(1024)
	want.Limits.MaxConnections = ptr(10_000)
	want.Limits.MaxSubscriptions = ptr(100)
	want.Limits.MaxTLSHandshakes = 32
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("DefaultEdge() =\n%+v\nwant\n%+v", c, want)
	}
}

// TestEnsureDefaultsProfile checks that memory.profile alone chooses every other default.
func TestEnsureDefaultsProfile(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    *Config
	}{
		{"", Default()},
		{"server", Default()},
		{"edge", DefaultEdge()},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			c := &Config{Memory: Memory{Profile: tc.profile}}
			c.EnsureDefaults()
			if !reflect.DeepEqual(c, tc.want) {
				t.Fatalf("got\n%+v\nwant\n%+v", c, tc.want)
			}
		})
	}
}

func TestEnsureDefaultsUnknownProfile(t *testing.T) {
	c := &Config{Memory: Memory{Profile: "tiny"}}
	c.EnsureDefaults()
	want := Default()
	want.Memory.Profile = "tiny"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n%+v\nwant server defaults with the name kept", c)
	}
	checkErr(t, c.Validate(), `memory.profile: "tiny" is not one of server, edge`)
}

func TestEnsureDefaultsKeepsExplicitValues(t *testing.T) {
	c := &Config{
		Auth:        Auth{AllowAnonymous: ptr(false)},
		MQTT:        MQTT{TopicAliasMaximum: ptr(0), MaxQoS: ptr(1), RetainAvailable: ptr(false), ReceiveMaximum: 10},
		Memory:      Memory{Profile: "edge", ReturnToOS: ptr(Duration(0)), Limit: 64 << 20},
		SysInterval: ptr(Duration(0)),
	}
	c.EnsureDefaults()
	switch {
	case *c.Auth.AllowAnonymous:
		t.Error("auth.allow_anonymous: explicit false replaced")
	case *c.MQTT.TopicAliasMaximum != 0:
		t.Error("mqtt.topic_alias_maximum: explicit 0 replaced")
	case *c.MQTT.MaxQoS != 1:
		t.Error("mqtt.max_qos: explicit 1 replaced")
	case *c.MQTT.RetainAvailable:
		t.Error("mqtt.retain_available: explicit false replaced")
	case c.MQTT.ReceiveMaximum != 10:
		t.Error("mqtt.receive_maximum: explicit 10 replaced")
	case *c.Memory.ReturnToOS != 0:
		t.Error("memory.return_to_os: explicit 0 replaced")
	case c.Memory.Limit != 64<<20:
		t.Error("memory.limit: explicit 64MiB replaced")
	case *c.SysInterval != 0:
		t.Error("sys_interval: explicit 0 replaced")
	}
}

func TestEnsureDefaultsListener(t *testing.T) {
	for _, tc := range []struct {
		in, want Listener
	}{
		{Listener{Type: "tcp", Address: ":1883"}, Listener{Name: "tcp@:1883", Type: "tcp", Address: ":1883"}},
		{Listener{Name: "x", Type: "ws", Address: ":80"}, Listener{Name: "x", Type: "ws", Address: ":80", Path: "/mqtt"}},
		{Listener{Name: "x", Type: "wss", Address: ":443", Path: "/m", TLS: &TLS{}},
			Listener{Name: "x", Type: "wss", Address: ":443", Path: "/m", TLS: &TLS{MinVersion: "1.2"}}},
		{Listener{Name: "x", Type: "tls", Address: ":8883", TLS: &TLS{MinVersion: "1.3"}},
			Listener{Name: "x", Type: "tls", Address: ":8883", TLS: &TLS{MinVersion: "1.3"}}},
	} {
		t.Run(tc.in.Type+"@"+tc.in.Address, func(t *testing.T) {
			c := &Config{Listeners: []Listener{tc.in}}
			c.EnsureDefaults()
			if !reflect.DeepEqual(c.Listeners[0], tc.want) {
				t.Fatalf("got %+v, want %+v", c.Listeners[0], tc.want)
			}
		})
	}
}

func TestEnsureDefaultsIdempotent(t *testing.T) {
	for _, c := range []*Config{Default(), DefaultEdge()} {
		t.Run(c.Memory.Profile, func(t *testing.T) {
			again := c.Clone()
			again.EnsureDefaults()
			if !reflect.DeepEqual(c, again) {
				t.Fatalf("EnsureDefaults changed a defaulted config:\n%+v\n%+v", c, again)
			}
		})
	}
}

// TestProfilesDoNotShare checks that each call returns fresh pointers, so that one
// config's change cannot leak into another's defaults.
func TestProfilesDoNotShare(t *testing.T) {
	a, b := Default(), Default()
	*a.MQTT.MaxQoS = 0
	a.Listeners[0].Name = "changed"
	if *b.MQTT.MaxQoS != 2 || b.Listeners[0].Name != "mqtt" {
		t.Fatal("two Default() calls share memory")
	}
}
