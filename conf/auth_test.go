package conf

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAuthAnonymous(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Auth
		want bool
	}{
		{"unset, no password file", Auth{}, true},
		{"unset, password file", Auth{PasswordFile: "p"}, false},
		{"true, password file", Auth{AllowAnonymous: ptr(true), PasswordFile: "p"}, true},
		{"false, password file", Auth{AllowAnonymous: ptr(false), PasswordFile: "p"}, false},
		{"false, no password file", Auth{AllowAnonymous: ptr(false)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Anonymous(); got != tc.want {
				t.Fatalf("Anonymous() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAuthValidate breaks one auth rule per case, at the top level and in a listener's
// block, starting from the defaults.
func TestAuthValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"allow_anonymous=false without password_file", func(c *Config) { c.Auth.AllowAnonymous = ptr(false) },
			"auth.allow_anonymous: false, and there is no password_file: no client could connect to listener mqtt"},
		{"allow_anonymous=false with password_file", func(c *Config) {
			c.Auth.AllowAnonymous, c.Auth.PasswordFile = ptr(false), "/etc/bifrost/passwd"
		}, ""},
		{"cache_size=-1", func(c *Config) { c.Auth.CacheSize = ptr(-1) }, "auth.cache_size: -1 is out of range 0..2147483647"},
		{"cache_size=0", func(c *Config) { c.Auth.CacheSize = ptr(0) }, ""},
		{"cache_ttl=0", func(c *Config) { c.Auth.CacheTTL = 0 }, "auth.cache_ttl: must be positive, got 0s"},
		{"listeners[1].auth.allow_anonymous=false", func(c *Config) {
			c.Listeners[1].Auth = &Auth{AllowAnonymous: ptr(false), CacheTTL: Duration(time.Second)}
		}, "listeners[1].auth.allow_anonymous: false, and there is no password_file: no client could connect to listener ws"},
		{"allow_anonymous=false, every listener with its own block", func(c *Config) {
			c.Auth.AllowAnonymous = ptr(false)
			for i := range c.Listeners {
				c.Listeners[i].Auth = &Auth{PasswordFile: "p", CacheTTL: Duration(time.Second)}
			}
		}, ""},
		{"allow_anonymous=false, client certificates", func(c *Config) {
			c.Auth.AllowAnonymous = ptr(false)
			c.Listeners = []Listener{{Name: "s", Type: "tls", Address: ":8883",
				TLS: &TLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca", MinVersion: "1.2"}}}
		}, ""},
		{"listeners[1].auth.cache_ttl=-1s", func(c *Config) {
			c.Listeners[1].Auth = &Auth{CacheTTL: Duration(-time.Second)}
		}, "listeners[1].auth.cache_ttl: must be positive, got -1s"},
		{"foreign_session=refuse", func(c *Config) { c.Auth.ForeignSession = ForeignRefuse }, ""},
		{"foreign_session=inherit", func(c *Config) { c.Auth.ForeignSession = "inherit" },
			`auth.foreign_session: "inherit" is not one of discard, refuse`},
		{"listeners[0].auth.foreign_session=keep", func(c *Config) {
			c.Listeners[0].Auth = &Auth{CacheTTL: Duration(time.Second), ForeignSession: "keep"}
		}, `listeners[0].auth.foreign_session: "keep" is not one of discard, refuse`},
		{"client_ids", func(c *Config) { c.Auth.ClientIDs = []string{"%u", "%u-*", "sensor-*", "fixed"} }, ""},
		{"client_ids with * inside", func(c *Config) { c.Auth.ClientIDs = []string{"%u", "a*b"} },
			`auth.client_ids[1]: "a*b": * is allowed only at the end`},
		{"client_ids with %c", func(c *Config) { c.Auth.ClientIDs = []string{"%c-*"} },
			`auth.client_ids[0]: "%c-*": % may only be followed by u (%u, the user name)`},
		{"client_ids empty pattern", func(c *Config) { c.Auth.ClientIDs = []string{""} },
			`auth.client_ids[0]: "": empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(c)
			checkErr(t, c.Validate(), tc.want)
		})
	}
}

// TestAuthListenerBlock parses a listener's own auth block: it is defaulted like the
// top-level one, keeps allow_anonymous unset, and its errors carry their lines.
func TestAuthListenerBlock(t *testing.T) {
	c, err := Parse([]byte(`
auth:
  password_file: /etc/bifrost/passwd
  acl_file: /etc/bifrost/acl
listeners:
  - {type: tcp, address: "127.0.0.1:1883"}
  - type: tcp
    address: ":1884"
    auth:
      password_file: /etc/bifrost/passwd.devices
      cache_size: 10
`), "bifrost.yaml")
	if err != nil {
		t.Fatal(err)
	}
	top, own := c.ListenerAuth(0), c.ListenerAuth(1)
	if top.PasswordFile != "/etc/bifrost/passwd" || top.ACLFile != "/etc/bifrost/acl" {
		t.Errorf("listener 0 does not use the top-level block: %+v", top)
	}
	switch {
	case own.PasswordFile != "/etc/bifrost/passwd.devices", own.ACLFile != "":
		t.Errorf("listener 1's block is not its own (it replaces the top-level one as a whole): %+v", own)
	case own.AllowAnonymous != nil:
		t.Error("allow_anonymous was given a default; unset has its own meaning")
	case *own.CacheSize != 10, own.CacheTTL != Duration(2*time.Minute):
		t.Errorf("listener block defaults: cache_size %d, cache_ttl %s", *own.CacheSize, own.CacheTTL)
	}

	_, err = Parse([]byte(`
listeners:
  - {type: tcp, address: "127.0.0.1:1883"}
  - type: tcp
    address: ":1884"
    auth:
      allow_anonymous: false
`), "bifrost.yaml")
	checkErr(t, err, "bifrost.yaml:7: listeners[1].auth.allow_anonymous: false, and there is no password_file")

	_, err = Parse([]byte("listeners:\n  - type: tcp\n    address: :1\n    auth: {password: x}\n"), "bifrost.yaml")
	checkErr(t, err, "bifrost.yaml:4: listeners[0].auth.password: unknown key")
}

func TestCheckExposure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		address string
		auth    Auth
		own     *Auth // the listener's block, if any
		exposed bool
	}{
		{"loopback v4", "127.0.0.1:1883", Auth{}, nil, false},
		{"loopback 127/8", "127.3.2.1:1883", Auth{}, nil, false},
		{"loopback v6", "[::1]:1883", Auth{}, nil, false},
		{"localhost", "localhost:1883", Auth{}, nil, false},
		{"all interfaces", ":1883", Auth{}, nil, true},
		{"0.0.0.0", "0.0.0.0:1883", Auth{}, nil, true},
		{"[::]", "[::]:1883", Auth{}, nil, true},
		{"an address", "192.0.2.7:1883", Auth{}, nil, true},
		{"a host name", "broker.example:1883", Auth{}, nil, true},
		{"password file", ":1883", Auth{PasswordFile: "p"}, nil, false},
		{"explicit true", ":1883", Auth{AllowAnonymous: ptr(true)}, nil, false},
		{"explicit false", ":1883", Auth{AllowAnonymous: ptr(false)}, nil, false},
		{"own block exposes", ":1883", Auth{PasswordFile: "p"}, &Auth{}, true},
		{"own block closes", ":1883", Auth{}, &Auth{PasswordFile: "p"}, false},
		{"client certificates", ":8883", Auth{}, nil, false},
		{"tls without client certificates", ":8884", Auth{}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Auth = tc.auth
			c.Listeners[1].Address = tc.address
			c.Listeners[1].Auth = tc.own
			switch tc.address {
			case ":8883":
				c.Listeners[1].TLS = &TLS{ClientCAFile: "ca.pem"}
			case ":8884":
				c.Listeners[1].TLS = &TLS{}
			}
			err := c.CheckExposure()
			if !tc.exposed {
				if err != nil {
					t.Fatalf("CheckExposure() = %v, want nil", err)
				}
				return
			}
			var errs *Errors
			if !errors.As(err, &errs) || len(errs.List) != 1 || errs.List[0].Field != "listeners[1].address" {
				t.Fatalf("CheckExposure() = %v, want one error for listeners[1].address", err)
			}
			block := "auth"
			if tc.own != nil {
				block = "listeners[1].auth"
			}
			if !strings.Contains(err.Error(), block+".password_file") || !strings.Contains(err.Error(), "listener ws") {
				t.Errorf("message %q does not name the listener and %s", err, block)
			}
		})
	}
}

func TestReloadableListenerAuth(t *testing.T) {
	cur := Default()
	cur.Listeners[0].Auth = &Auth{PasswordFile: "a", CacheSize: ptr(1), CacheTTL: Duration(time.Minute)}

	next := cur.Clone()
	next.Listeners[0].Auth.PasswordFile = "b"
	next.Listeners[0].Auth.AllowAnonymous = ptr(true)
	changed, err := cur.Reloadable(next)
	if err != nil {
		t.Fatalf("a listener's auth settings need no restart: %v", err)
	}
	if want := []string{"listeners[mqtt].auth.allow_anonymous", "listeners[mqtt].auth.password_file"}; !slices.Equal(slices.Sorted(slices.Values(changed)), want) {
		t.Errorf("changed = %q, want %q", changed, want)
	}

	next = cur.Clone()
	next.Listeners[0].Auth = nil
	if _, err := cur.Reloadable(next); err == nil || !strings.Contains(err.Error(), "listeners[mqtt].auth: changed; "+restartListenerRealm) {
		t.Errorf("removing a listener's auth block: err = %v, want a restart", err)
	}
}

func TestCloneListenerAuth(t *testing.T) {
	c := Default()
	c.Listeners[0].Auth = &Auth{AllowAnonymous: ptr(true), CacheSize: ptr(3)}
	n := c.Clone()
	*n.Listeners[0].Auth.AllowAnonymous = false
	*n.Listeners[0].Auth.CacheSize = 4
	*n.Auth.CacheSize = 5
	if !*c.Listeners[0].Auth.AllowAnonymous || *c.Listeners[0].Auth.CacheSize != 3 || *c.Auth.CacheSize != 65536 {
		t.Fatal("changing the clone's auth blocks changed the original")
	}
}
