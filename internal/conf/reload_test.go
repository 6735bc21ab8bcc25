package conf

import (
	"errors"
	"slices"
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
			c.Log.Format = "json"
			c.MQTT.ReceiveMaximum = 10
			c.MQTT.MaxQoS = ptr(1)
			c.MQTT.RetainAvailable = nil
			c.Queue.OfflineBytes = 1 << 20
			c.Auth.ACLFile = "acl.conf"
			c.Memory.Limit = 1 << 30
			c.Memory.ReturnToOS = ptr(Duration(time.Minute))
			c.SysInterval = ptr(Duration(0))
		}, []string{"auth.acl_file", "log.format", "mqtt.receive_maximum", "mqtt.max_qos",
			"mqtt.retain_available", "queue.offline_bytes", "memory.limit", "memory.return_to_os", "sys_interval"}, nil},
		{"listener address", func(c *Config) { c.Listeners[1].Address = ":8083" }, nil, []string{"listeners[1].address"}},
		{"listener tls", func(c *Config) { c.Listeners[0].TLS = &TLS{} }, nil, []string{"listeners[0].tls"}},
		{"listener added", func(c *Config) { c.Listeners = append(c.Listeners, Listener{Name: "x"}) }, nil, []string{"listeners"}},
		{"restart fields", func(c *Config) {
			c.HTTP.Address = "off"
			c.Store.Dir = "/var/lib/bifrost"
			c.Store.SyncInterval = Duration(time.Second)
			c.Memory.Profile = "edge"
		}, nil, []string{"http.address", "memory.profile", "store.dir", "store.sync_interval"}},
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
					if e.Msg != "changed; takes effect only after a restart" {
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
