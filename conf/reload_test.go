package conf

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReloadable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     func(*Config)
		live    []string // want changed
		restart []string // want fields in the error
	}{
		{"nothing", func(*Config) {}, nil, nil},
		{"log.level", func(c *Config) { c.Log.Level = "debug" }, []string{"log.level"}, nil},
		{"live limits", func(c *Config) {
			c.MQTT.ReceiveMaximum = 10
			c.MQTT.MaxQoS = ptr(1)
			c.MQTT.RetainAvailable = nil
			c.Queue.OfflineBytes = 1 << 20
			c.Queue.WhenFull = QueueBackpressure
			c.Queue.MaxPause = Duration(time.Minute)
			c.Auth.ACLFile = "acl.conf"
			c.Memory.Limit = 1 << 30
			c.Memory.ReturnToOS = ptr(Duration(time.Minute))
			c.SysInterval = ptr(Duration(0))
			c.Limits.MaxConnections = ptr(5)
			c.Limits.PublishRate = 3
			c.Limits.AuthFailures.Max = ptr(7)
		}, []string{"auth.acl_file", "mqtt.receive_maximum", "mqtt.max_qos",
			"mqtt.retain_available", "queue.offline_bytes", "queue.when_full", "queue.max_pause", "memory.limit", "memory.return_to_os", "sys_interval",
			"limits.max_connections", "limits.publish_rate", "limits.auth_failures.max"}, nil},
		{"admin credentials", func(c *Config) {
			c.HTTP.Admin.TokenFile = "tokens"
			c.HTTP.Admin.Users = []string{"root"}
		}, []string{"http.admin.token_file", "http.admin.users"}, nil},
		{"listener address", func(c *Config) { c.Listeners[1].Address = ":8083" }, []string{"listeners[ws].address"}, nil},
		{"listener tls", func(c *Config) { c.Listeners[0].TLS = &TLS{} }, []string{"listeners[mqtt].tls"}, nil},
		{"listener added", func(c *Config) { c.Listeners = append(c.Listeners, Listener{Name: "x"}) }, []string{"listeners[x]"}, nil},
		{"listener removed", func(c *Config) { c.Listeners = c.Listeners[:1] }, []string{"listeners[ws]"}, nil},
		{"listener auth block", func(c *Config) { c.Listeners[0].Auth = &Auth{} }, nil, []string{"listeners[mqtt].auth"}},
		{"listener added with auth", func(c *Config) { c.Listeners = append(c.Listeners, Listener{Name: "x", Auth: &Auth{}}) },
			nil, []string{"listeners[x]"}},
		{"restart fields", func(c *Config) {
			c.HTTP.Address = "off"
			c.Store.Dir = "/var/lib/bifrost"
			c.Store.SyncInterval = Duration(time.Second)
			c.Memory.Profile = "edge"
			c.Log.Format = "json"
			c.Limits.MaxTLSHandshakes = 3
			c.Queue.OnlineMessages = 3
		}, nil, []string{"http.address", "memory.profile", "store.dir", "store.sync_interval",
			"log.format", "limits.max_tls_handshakes", "queue.online_messages"}},
		{"both", func(c *Config) {
			c.Log.Level = "warn"
			c.Store.Sync = "none"
		}, []string{"log.level"}, []string{"store.sync"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur, next := Default(), Default()
			tc.set(next)
			changed, err := cur.Reloadable(next)
			if !sameSet(changed, tc.live) {
				t.Errorf("changed = %q, want %q", changed, tc.live)
			}
			var restart []string
			var errs *Errors
			if errors.As(err, &errs) {
				for _, e := range errs.List {
					if !strings.HasPrefix(e.Msg, "changed; ") || !strings.Contains(e.Msg, "restart") {
						t.Errorf("%s: message %q", e.Field, e.Msg)
					}
					restart = append(restart, e.Field)
				}
			} else if err != nil {
				t.Fatalf("err = %v; want *Errors", err)
			}
			if !sameSet(restart, tc.restart) {
				t.Errorf("restart = %q, want %q", restart, tc.restart)
			}

			// What Applied puts in force holds every live change and none of the others.
			applied := cur.Applied(next)
			var rest, done []string
			for _, ch := range applied.Changes(next) {
				rest = append(rest, ch.Field)
			}
			for _, ch := range cur.Changes(applied) {
				done = append(done, ch.Field)
			}
			if !sameSet(rest, tc.restart) {
				t.Errorf("Applied(next) still differs from next in %q, want %q", rest, tc.restart)
			}
			if !sameSet(done, tc.live) {
				t.Errorf("Applied(next) differs from the running config in %q, want %q", done, tc.live)
			}
		})
	}
}

func TestChanges(t *testing.T) {
	withBridge := func(c *Config) *Config {
		c.Bridges = []Bridge{{Name: "up", Address: "127.0.0.1:1884", Password: "old-pw"}}
		return c
	}
	withCluster := func(c *Config) *Config {
		c.Cluster = &Cluster{Secret: "0123456789abcdef-old"}
		return c
	}
	for _, tc := range []struct {
		name      string
		cur, next *Config
		set       func(*Config)
		want      []string // Change.String()
	}{
		{"level", Default(), nil, func(c *Config) { c.Log.Level = "debug" },
			[]string{`log.level: "info" → "debug"`}},
		{"pointer value", Default(), nil, func(c *Config) { c.Limits.MaxConnections = ptr(7) },
			[]string{`limits.max_connections: 1000000 → 7`}},
		{"duration and size", Default(), nil, func(c *Config) {
			c.SysInterval = ptr(Duration(time.Minute))
			c.Queue.OfflineBytes = 2 << 20
		}, []string{`queue.offline_bytes: 16MiB → 2MiB`, `sys_interval: 10s → 1m0s`}},
		{"secret masked", withCluster(Default()), nil, func(c *Config) { c.Cluster.Secret = "0123456789abcdef-new" },
			[]string{`cluster.secret: *** → *** (takes effect only after a restart)`}},
		{"auth on a cluster node", withCluster(Default()), nil, func(c *Config) { c.Auth.PasswordFile = "pw" },
			[]string{`auth.password_file: "" → "pw" (` + restartClusterAuth + `)`}},
		{"bridge password masked", withBridge(Default()), nil, func(c *Config) { c.Bridges[0].Password = "new-pw" },
			[]string{`bridges[0].remote_password: *** → *** (takes effect only after a restart)`}},
		{"bridge added", withBridge(Default()), nil, func(c *Config) { c.Bridges = append(c.Bridges, c.Bridges[0]) },
			[]string{`bridges: 1 entries → 2 entries (takes effect only after a restart)`}},
		{"listener added", Default(), nil, func(c *Config) {
			c.Listeners = append(c.Listeners, Listener{Name: "more", Type: ListenerTCP, Address: "127.0.0.1:1884"})
		}, []string{`listeners[more]: (none) → tcp 127.0.0.1:1884`}},
		{"listener removed and changed", Default(), nil, func(c *Config) {
			c.Listeners = c.Listeners[:1]
			c.Listeners[0].MaxConnections = 3
		}, []string{`listeners[mqtt].max_connections: 0 → 3`, `listeners[ws]: ws 127.0.0.1:8083 → (none)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := tc.cur.Clone()
			tc.set(next)
			var got []string
			for _, ch := range tc.cur.Changes(next) {
				got = append(got, ch.String())
			}
			if !sameSet(got, tc.want) {
				t.Errorf("Changes =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestHolderReload(t *testing.T) {
	first := Default()
	h := NewHolder(first)

	live := first.Clone()
	live.Log.Level = "debug"
	if changed, err := h.Reload(live); err != nil || !slices.Equal(changed, []string{"log.level"}) {
		t.Fatalf("Reload(live) = %q, %v", changed, err)
	}
	if h.Load() != live {
		t.Fatal("a live change was not swapped in")
	}

	restart := live.Clone()
	restart.Store.Dir = "elsewhere"
	if _, err := h.Reload(restart); err == nil {
		t.Fatal("Reload(store.dir) succeeded; want an error")
	}
	if h.Load() != live {
		t.Fatal("a change needing a restart was swapped in")
	}

	var zero Holder
	if _, err := zero.Reload(first); err != nil || zero.Load() != first {
		t.Fatalf("zero Holder: Reload = %v, Load = %p", err, zero.Load())
	}
}

// TestHolderConcurrent lets readers load snapshots while reloads swap them; run with
// -race. Every snapshot a reader sees is whole.
func TestHolderConcurrent(t *testing.T) {
	h := NewHolder(Default())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				if c := h.Load(); c.Log.Level != "info" && c.Log.Level != "debug" {
					t.Errorf("torn snapshot: level %q", c.Log.Level)
					return
				}
			}
		})
	}
	for i := range 100 {
		next := h.Load().Clone()
		next.Log.Level = []string{"info", "debug"}[i%2]
		if _, err := h.Reload(next); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
