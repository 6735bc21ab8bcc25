package conf

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestClusterAbsent: without a cluster block there is no cluster, and defaults do not
// invent one.
func TestClusterAbsent(t *testing.T) {
	c, err := Parse([]byte("log:\n  level: info\n"), "bifrost.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster != nil {
		t.Fatalf("cluster = %+v; want nil without a block", c.Cluster)
	}
	if err := c.CheckClusterExposure(); err != nil {
		t.Fatalf("CheckClusterExposure without a block: %v", err)
	}
}

// TestClusterDefaults checks an empty block takes every default, the Raft directory
// inside store.dir among them.
func TestClusterDefaults(t *testing.T) {
	c, err := Parse([]byte("store:\n  dir: /var/lib/bifrost\ncluster: {}\n"), "bifrost.yaml")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := &Cluster{
		NodeName:        host,
		Bind:            "127.0.0.1:7946",
		RPC:             "127.0.0.1:7947",
		BootstrapExpect: 3,
		Dir:             filepath.Join("/var/lib/bifrost", "cluster"),
		RedirectLoad:    0.9,
		Lease:           Duration(5 * time.Second),
		ClaimTimeout:    Duration(9 * time.Second),
	}
	if !reflect.DeepEqual(c.Cluster, want) {
		t.Fatalf("cluster = %+v\nwant      %+v", c.Cluster, want)
	}
	// Idempotent, as EnsureDefaults must be.
	again := c.Clone()
	again.EnsureDefaults()
	if !reflect.DeepEqual(again, c) {
		t.Fatal("EnsureDefaults changed a defaulted cluster block")
	}
}

// TestClusterParse checks every key is read as written.
func TestClusterParse(t *testing.T) {
	c, err := Parse([]byte(`store:
  dir: "off"
cluster:
  node_name: n1
  bind: 10.0.0.1:7000
  advertise: 192.0.2.1:7000
  rpc: :7001
  rpc_advertise: n1.example:7001
  seeds: [10.0.0.2:7000, "n3.example:7000"]
  bootstrap_expect: 5
  dir: /srv/raft
  secret: 0123456789abcdef0123
  mqtt_advertise: mqtt.example:1883
  redirect_load: 0.75
  lease: 4s
  claim_timeout: 7s
`), "bifrost.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Cluster{NodeName: "n1", Bind: "10.0.0.1:7000", Advertise: "192.0.2.1:7000", RPC: ":7001",
		RPCAdvertise: "n1.example:7001", Seeds: []string{"10.0.0.2:7000", "n3.example:7000"}, BootstrapExpect: 5,
		Dir: "/srv/raft", Secret: "0123456789abcdef0123", MQTTAdvertise: "mqtt.example:1883", RedirectLoad: 0.75,
		Lease: Duration(4 * time.Second), ClaimTimeout: Duration(7 * time.Second)}
	if !reflect.DeepEqual(c.Cluster, want) {
		t.Fatalf("cluster = %+v\nwant      %+v", c.Cluster, want)
	}
}

// TestClusterValidate breaks one rule per case, from a valid block, and checks the error
// names the field.
func TestClusterValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" means valid; else the expected "field: message" (a prefix suffices)
	}{
		{"valid", func(*Config) {}, ""},
		{"node_name empty", func(c *Config) { c.Cluster.NodeName = "" }, "cluster.node_name: required"},
		{"node_name space", func(c *Config) { c.Cluster.NodeName = "node 1" },
			`cluster.node_name: "node 1" may hold only letters, digits`},
		{"node_name long", func(c *Config) { c.Cluster.NodeName = strings.Repeat("n", 65) },
			"cluster.node_name: \"" + strings.Repeat("n", 65) + "\" is longer than 64 bytes"},
		{"bind not host:port", func(c *Config) { c.Cluster.Bind = "7946" }, `cluster.bind: "7946" is not host:port`},
		{"bind a name", func(c *Config) { c.Cluster.Bind = "localhost:7946" },
			`cluster.bind: "localhost:7946": the host must be an IP address`},
		{"bind all interfaces", func(c *Config) { c.Cluster.Bind = ":7946" }, ""},
		{"bind port 0", func(c *Config) { c.Cluster.Bind = "127.0.0.1:0" }, ""},
		{"advertise no host", func(c *Config) { c.Cluster.Advertise = ":7946" },
			`cluster.advertise: ":7946": a host is required`},
		{"advertise port 0", func(c *Config) { c.Cluster.Advertise = "192.0.2.1:0" },
			`cluster.advertise: "192.0.2.1:0": port 0 cannot be dialled`},
		{"rpc bad port", func(c *Config) { c.Cluster.RPC = "127.0.0.1:70000" },
			`cluster.rpc: "127.0.0.1:70000" is not host:port`},
		{"rpc clashes with bind", func(c *Config) { c.Cluster.RPC = c.Cluster.Bind },
			`cluster.rpc: "127.0.0.1:7946" is also used by cluster.bind`},
		{"rpc clashes with a listener", func(c *Config) { c.Cluster.RPC = "127.0.0.1:1883" },
			`cluster.rpc: "127.0.0.1:1883" is also used by listeners[0]`},
		{"bind clashes with http", func(c *Config) { c.Cluster.Bind = ":8080" },
			`cluster.bind: ":8080" is also used by http`},
		{"rpc_advertise bad", func(c *Config) { c.Cluster.RPCAdvertise = "n1" }, `cluster.rpc_advertise: "n1" is not host:port`},
		{"seed bad", func(c *Config) { c.Cluster.Seeds = []string{"127.0.0.1:7946", "n2"} },
			`cluster.seeds[1]: "n2" is not host:port`},
		{"seed port 0", func(c *Config) { c.Cluster.Seeds = []string{"n2:0"} }, `cluster.seeds[0]: "n2:0": port 0 cannot be dialled`},
		{"bootstrap_expect -1", func(c *Config) { c.Cluster.BootstrapExpect = -1 },
			"cluster.bootstrap_expect: -1 is out of range 1..1000"},
		{"bootstrap_expect 1", func(c *Config) { c.Cluster.BootstrapExpect = 1 }, ""},
		{"dir empty", func(c *Config) { c.Cluster.Dir = "" }, "cluster.dir: required"},
		{"dir empty, store off", func(c *Config) { c.Store.Dir = StoreOff; c.Cluster.Dir = "" },
			"cluster.dir: required when store.dir is off"},
		{"secret short", func(c *Config) { c.Cluster.Secret = "short" }, "cluster.secret: 5 bytes; at least 16"},
		{"secret 16", func(c *Config) { c.Cluster.Secret = "0123456789abcdef" }, ""},
		{"mqtt_advertise bad", func(c *Config) { c.Cluster.MQTTAdvertise = "x" }, `cluster.mqtt_advertise: "x" is not host:port`},
		{"redirect_load 0", func(c *Config) { c.Cluster.RedirectLoad = 0 }, "cluster.redirect_load: 0 is out of range"},
		{"redirect_load 1.5", func(c *Config) { c.Cluster.RedirectLoad = 1.5 }, "cluster.redirect_load: 1.5 is out of range"},
		{"redirect_load 1", func(c *Config) { c.Cluster.RedirectLoad = 1 }, ""},
		{"lease 500ms", func(c *Config) { c.Cluster.Lease = Duration(500 * time.Millisecond) },
			"cluster.lease: 500ms is below the minimum of 1s"},
		// The chain of a CONNECT's timeouts: connect_timeout > claim_timeout >= lease + 1s.
		{"lease 8500ms", func(c *Config) { c.Cluster.Lease = Duration(8500 * time.Millisecond) },
			"cluster.lease: 8.5s and 1s for the claim do not fit in cluster.claim_timeout (9s)"},
		{"lease 8s", func(c *Config) { c.Cluster.Lease = Duration(8 * time.Second) }, ""},
		{"lease 9s, claim_timeout 10s", func(c *Config) {
			c.Cluster.Lease, c.Cluster.ClaimTimeout = Duration(9*time.Second), Duration(10*time.Second)
		}, "cluster.claim_timeout: 10s is not below mqtt.connect_timeout (10s)"},
		{"lease 9s, claim_timeout 10s, connect_timeout 12s", func(c *Config) {
			c.Cluster.Lease, c.Cluster.ClaimTimeout = Duration(9*time.Second), Duration(10*time.Second)
			c.MQTT.ConnectTimeout = Duration(12 * time.Second)
		}, ""},
		{"claim_timeout 10s", func(c *Config) { c.Cluster.ClaimTimeout = Duration(10 * time.Second) },
			"cluster.claim_timeout: 10s is not below mqtt.connect_timeout (10s)"},
		{"connect_timeout 5s", func(c *Config) { c.MQTT.ConnectTimeout = Duration(5 * time.Second) },
			"cluster.claim_timeout: 9s is not below mqtt.connect_timeout (5s)"},
		{"claim_timeout -1s", func(c *Config) { c.Cluster.ClaimTimeout = Duration(-time.Second) },
			"cluster.claim_timeout: -1s: must be above 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Cluster = &Cluster{NodeName: "n1"}
			c.EnsureDefaults()
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

// TestClusterParseErrors checks the cluster block's problems come with file, line and
// field, as check-config prints them.
func TestClusterParseErrors(t *testing.T) {
	_, err := Parse([]byte(`store:
  dir: "off"
cluster:
  node_name: n1
  bootstrap_expect: -1
  secret: abc
  lease: 3
  sedes: []
`), "bifrost.yaml")
	want := strings.Join([]string{
		`bifrost.yaml:7: cluster.lease: "3" is not a duration (write it like 10s, 250ms or 1m30s)`,
		"bifrost.yaml:8: cluster.sedes: unknown key; expected one of node_name, bind, advertise, rpc, rpc_advertise, " +
			"seeds, bootstrap_expect, dir, secret, mqtt_advertise, redirect_load, lease, claim_timeout",
		"bifrost.yaml:3: cluster.dir: required when store.dir is off: Raft keeps its state across restarts",
		"bifrost.yaml:5: cluster.bootstrap_expect: -1 is out of range 1..1000",
		"bifrost.yaml:6: cluster.secret: 3 bytes; at least 16 (e.g. openssl rand -base64 32)",
	}, "\n")
	if err == nil {
		t.Fatal("no error")
	}
	// Sorted by line: decode errors and validation errors interleave.
	got := strings.Split(err.Error(), "\n")
	wantLines := strings.Split(want, "\n")
	if !sameSet(got, wantLines) {
		t.Fatalf("got\n%v\nwant (in any order)\n%s", err, want)
	}
}

// TestClusterReload: every cluster field needs a restart, and so does adding or removing
// the block.
func TestClusterReload(t *testing.T) {
	base := Default()
	base.Cluster = &Cluster{NodeName: "n1", Seeds: []string{"127.0.0.1:7946"}}
	base.EnsureDefaults()

	next := base.Clone()
	next.Cluster.Seeds = append(next.Cluster.Seeds, "127.0.0.1:8946")
	next.Cluster.Lease = Duration(time.Minute)
	next.Cluster.RedirectLoad = 0.5
	checkRestart(t, base, next, "cluster.seeds", "cluster.lease", "cluster.redirect_load")

	checkRestart(t, Default(), base, "cluster")
	checkRestart(t, base, Default(), "cluster")
}

func checkRestart(t *testing.T, cur, next *Config, fields ...string) {
	t.Helper()
	changed, err := cur.Reloadable(next)
	if len(changed) != 0 {
		t.Errorf("live changes %q; want none", changed)
	}
	var errs *Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Reloadable = %v; want the fields that need a restart", err)
	}
	var got []string
	for _, e := range errs.List {
		got = append(got, e.Field)
		if e.Msg != "changed; takes effect only after a restart" {
			t.Errorf("%s: %q", e.Field, e.Msg)
		}
	}
	if !sameSet(got, fields) {
		t.Errorf("restart fields %q; want %q", got, fields)
	}
}

// TestClusterExposure: gossip or RPC off loopback needs a secret.
func TestClusterExposure(t *testing.T) {
	c := Default()
	c.Cluster = &Cluster{NodeName: "n1", Bind: "0.0.0.0:7946", RPC: "10.0.0.1:7947"}
	c.EnsureDefaults()
	err := c.CheckClusterExposure()
	want := `cluster.bind: "0.0.0.0:7946" is reachable from the network and the cluster has no secret: set cluster.secret` +
		"\n" + `cluster.rpc: "10.0.0.1:7947" is reachable from the network and the cluster has no secret: set cluster.secret`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	c.Cluster.Secret = "0123456789abcdef"
	if err := c.CheckClusterExposure(); err != nil {
		t.Fatalf("with a secret: %v", err)
	}
	c.Cluster = &Cluster{NodeName: "n1"}
	c.EnsureDefaults()
	if err := c.CheckClusterExposure(); err != nil {
		t.Fatalf("on loopback: %v", err)
	}
}

// TestExampleClusterBlock uncomments the sample file's cluster block: it must parse, and
// every value it shows must be the default, except the node name and seeds it
// illustrates.
func TestExampleClusterBlock(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "# cluster:") || len(block) > 0 && strings.HasPrefix(line, "#   ") {
			block = append(block, strings.TrimPrefix(line, "# "))
		} else if len(block) > 0 {
			break // the block ends; other commented-out blocks follow
		}
	}
	if len(block) == 0 {
		t.Fatalf("%s: no commented-out cluster block", exampleFile)
	}
	c, err := Parse([]byte(strings.Join(block, "\n")), exampleFile)
	if err != nil {
		t.Fatalf("the sample's cluster block:\n%s\n%v", strings.Join(block, "\n"), err)
	}
	d := Default()
	d.Cluster = &Cluster{NodeName: "n1", Seeds: []string{"127.0.0.1:7946"}}
	d.EnsureDefaults()
	if !reflect.DeepEqual(c.Cluster, d.Cluster) {
		t.Fatalf("the sample's cluster block = %+v\nwant the defaults %+v", c.Cluster, d.Cluster)
	}
}
