package endpoint

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

const (
	token    = "Bearer 0123456789abcdef0123"
	attacker = "rebind.attacker.test:8080"
)

// tokenAccess is admin access with one token, token.
func tokenAccess(t *testing.T) *auth.AdminAccess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("ops 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	acc, err := auth.NewAdminAccess(nil, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

// handler serves an endpoint configured as cfg says, cfg.Address deciding only whether
// it counts as on loopback: the test server itself listens on 127.0.0.1. It returns the
// server's URL and the endpoint's log.
func handler(t *testing.T, cfg conf.HTTP, acc *auth.AdminAccess) (string, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	s, err := newServer(cfg, metrics.New(nil), slog.New(slog.NewTextHandler(&logs, nil)), acc)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.srv.Handler)
	t.Cleanup(srv.Close)
	return srv.URL, &logs
}

// fetch GETs path with Host host ("" for the server's address) and Authorization authz.
func fetch(t *testing.T, url, path, host, authz string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+path, nil)
	if host != "" {
		req.Host = host
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// TestAccess is the matrix of docs/admin.md's "Who may reach what" for the endpoint's
// own routes: where each of http.metrics and http.pprof lets a request in, by the
// address (loopback or not), the credentials in force and those the request brings, and
// its Host.
func TestAccess(t *testing.T) {
	type call struct {
		path, host, authz string
		want              int
	}
	for _, tc := range []struct {
		name    string
		address string
		metrics string
		pprof   string
		hosts   []string
		acc     bool // a token in force, else no credentials
		calls   []call
	}{
		{"loopback, defaults", "127.0.0.1:8080", "open", "auto", nil, false, []call{
			{"/debug/pprof/cmdline", "", "", 200},
			{"/debug/pprof/cmdline", attacker, "", 421},
			{"/debug/pprof/heap", attacker, "", 421},
			{"/metrics", "", "", 200},
			{"/metrics", "localhost:8080", "", 200},
			{"/metrics", "[::1]:8080", "", 200},
			{"/metrics", "192.0.2.7:8080", "", 200},
			{"/metrics", attacker, "", 421},
			{"/metrics", "a.localhost:8080", "", 421},
			{"/load", attacker, "", 421},
			{"/healthz", attacker, "", 200},
		}},
		{"allowed hosts", "127.0.0.1:8080", "open", "auto", []string{"broker.example", "ops.example:9000"}, false, []call{
			{"/metrics", "Broker.Example:8080", "", 200},
			{"/metrics", "ops.example:9000", "", 200},
			{"/metrics", "ops.example:9001", "", 421},
			{"/debug/pprof/cmdline", "broker.example", "", 200},
		}},
		{"off loopback, token", "192.0.2.1:8080", "open", "auto", nil, true, []call{
			{"/debug/pprof/cmdline", "", "", 401},
			{"/debug/pprof/heap", "", "", 401},
			{"/debug/pprof/profile?seconds=1", "", "", 401},
			{"/debug/pprof/trace?seconds=1", "", "", 401},
			{"/debug/pprof/cmdline", "", "Bearer 0123456789abcdef0124", 401},
			{"/debug/pprof/cmdline", "", token, 200},
			{"/debug/pprof/cmdline", attacker, token, 200},
			{"/metrics", "", "", 200},
			{"/metrics", attacker, "", 421},
			{"/metrics", attacker, token, 200},
			{"/healthz", "", "", 200},
		}},
		{"off loopback, no credentials", "192.0.2.1:8080", "open", "auto", nil, false, []call{
			{"/debug/pprof/cmdline", "", "", 404},
			{"/debug/pprof/heap", "", "", 404},
			{"/metrics", "", "", 200},
		}},
		{"off loopback, pprof open", "192.0.2.1:8080", "open", "open", nil, false, []call{
			{"/debug/pprof/cmdline", "", "", 200},
			{"/debug/pprof/cmdline", attacker, "", 421},
		}},
		{"pprof off", "127.0.0.1:8080", "open", "off", nil, false, []call{
			{"/debug/pprof/", "", "", 404},
			{"/debug/pprof/cmdline", "", "", 404},
		}},
		{"loopback, pprof admin", "127.0.0.1:8080", "open", "admin", nil, true, []call{
			{"/debug/pprof/cmdline", "", "", 401},
			{"/debug/pprof/cmdline", "", token, 200},
		}},
		{"metrics admin", "127.0.0.1:8080", "admin", "auto", nil, true, []call{
			{"/metrics", "", "", 401},
			{"/load", "", "", 401},
			{"/metrics", attacker, token, 200},
			{"/load", "", token, 200},
			{"/healthz", "", "", 200},
		}},
		{"metrics admin, token file not loaded", "127.0.0.1:8080", "admin", "auto", nil, false, []call{
			{"/metrics", "", "", 401},
			{"/metrics", "", token, 401},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := conf.HTTP{Address: tc.address, Metrics: tc.metrics, PProf: tc.pprof, AllowedHosts: tc.hosts}
			var acc *auth.AdminAccess
			if tc.acc {
				acc = tokenAccess(t)
			}
			url, _ := handler(t, cfg, acc)
			for _, c := range tc.calls {
				code, h, body := fetch(t, url, c.path, c.host, c.authz)
				if code != c.want {
					t.Errorf("GET %s, Host %q, Authorization %q: %d %.80q; want %d", c.path, c.host, c.authz, code, body, c.want)
				}
				switch {
				case code == 421 && !strings.Contains(body, "http.allowed_hosts"):
					t.Errorf("GET %s: the 421 does not say what to do: %q", c.path, body)
				case code == 401 && h.Get("WWW-Authenticate") == "":
					t.Errorf("GET %s: a 401 without WWW-Authenticate", c.path)
				}
			}
		})
	}
}

// TestAccessLog: the endpoint says once at start what it serves off loopback without
// credentials, and that pprof is off there when there are none.
func TestAccessLog(t *testing.T) {
	_, logs := handler(t, conf.HTTP{Address: "192.0.2.1:8080", Metrics: "open", PProf: "auto"}, nil)
	for _, want := range []string{`msg="metrics open off loopback"`, `msg="pprof off"`} {
		if strings.Count(logs.String(), want) != 1 {
			t.Errorf("the log has not once %s:\n%s", want, logs)
		}
	}
	_, logs = handler(t, conf.HTTP{Address: "192.0.2.1:8080", Metrics: "admin", PProf: "open"}, tokenAccess(t))
	if strings.Contains(logs.String(), "metrics open") || !strings.Contains(logs.String(), `msg="pprof open off loopback"`) {
		t.Errorf("metrics admin, pprof open off loopback:\n%s", logs)
	}
	_, logs = handler(t, conf.HTTP{Address: "127.0.0.1:8080", Metrics: "open", PProf: "auto"}, nil)
	if logs.Len() != 0 {
		t.Errorf("on loopback, the defaults log:\n%s", logs)
	}
}
