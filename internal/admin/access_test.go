package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// request makes a call with Host host ("" for the server's address), Origin origin
// and Authorization authz when set, and returns the status and the error code of a
// JSON error ("" for none).
func request(t *testing.T, method, url, host, origin, authz, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e struct {
		Error apiError `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	return resp.StatusCode, e.Error.Code
}

// TestRebinding: with no credentials asked for (loopback, no http.admin), a call whose
// Host names another site, as a page of a site whose name was re-pointed at 127.0.0.1
// sends, is refused (421, JSON) and changes nothing, whatever its route: the issue's
// publish with Host and Origin alike, a disconnect, a listing, the dashboard. An IP
// address, localhost and an HTTP/1.0 call without Host pass.
func TestRebinding(t *testing.T) {
	srv, fb, _ := newAPI(t, &auth.AdminAccess{})
	const attacker = "rebind.attacker.test:8080"
	for _, tc := range []struct {
		method, path, body string
	}{
		{"POST", "/api/v1/publish", `{"topic":"x","payload":"y"}`},
		{"DELETE", "/api/v1/clients/a1", ""},
		{"DELETE", "/api/v1/retained/t/x", ""},
		{"POST", "/api/v1/reload", ""},
		{"GET", "/api/v1/clients", ""},
		{"GET", "/api/v1/config", ""},
		{"GET", "/api/v1/stream", ""},
		{"GET", "/dashboard/", ""},
	} {
		if code, ecode := request(t, tc.method, srv.URL+tc.path, attacker, "http://"+attacker, "", tc.body); code != http.StatusMisdirectedRequest || ecode != "misdirected" {
			t.Errorf("%s %s with Host %s: %d %q; want 421 misdirected", tc.method, tc.path, attacker, code, ecode)
		}
	}
	if len(fb.published) != 0 || len(fb.kicked) != 0 {
		t.Errorf("refused calls published %v and kicked %v", fb.published, fb.kicked)
	}
	for _, host := range []string{"", "127.0.0.1:8080", "127.1.2.3", "localhost", "LOCALHOST:8080", "[::1]:8080", "[::1]", "10.0.0.7:8080"} {
		if code, _ := request(t, "GET", srv.URL+"/api/v1/clients", host, "", "", ""); code != http.StatusOK {
			t.Errorf("GET /api/v1/clients with Host %q: %d; want 200", host, code)
		}
	}
	for _, host := range []string{"localhost.", "a.localhost:8080", "127.0.0.1.nip.io", "bifrost"} {
		if code, _ := request(t, "GET", srv.URL+"/api/v1/clients", host, "", "", ""); code != http.StatusMisdirectedRequest {
			t.Errorf("GET /api/v1/clients with Host %q: %d; want 421", host, code)
		}
	}
}

// TestAllowedHosts: a name of http.allowed_hosts passes, without a port for any port,
// with one for that port only, in any case.
func TestAllowedHosts(t *testing.T) {
	srv, _, _ := newAPIHosts(t, &auth.AdminAccess{}, NewHosts([]string{"Broker.Example", "ops.example:9000"}))
	for host, want := range map[string]int{
		"broker.example": 200, "BROKER.example:8080": 200, "ops.example:9000": 200,
		"ops.example:9001": 421, "ops.example": 421, "x.broker.example": 421,
	} {
		if code, _ := request(t, "GET", srv.URL+"/api/v1/clients", host, "", "", ""); code != want {
			t.Errorf("Host %q: %d; want %d", host, code, want)
		}
	}
}

// TestCredentialsPassAnyHost: where credentials are asked for, a call that brings them
// passes whatever its Host (a page of another site cannot send them), one that does not
// is asked for them (401, not 421, so a browser prompts); a change from another origin
// is refused even with them (a browser sends cached Basic credentials with a form).
func TestCredentialsPassAnyHost(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	acc, err := auth.NewAdminAccess(nil, tokens, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, fb, _ := newAPI(t, acc)
	const token, other = "Bearer 0123456789abcdef0123", "broker.example:8080"
	if code, _ := request(t, "GET", srv.URL+"/api/v1/clients", other, "", token, ""); code != http.StatusOK {
		t.Errorf("GET with the token, Host %s: %d; want 200", other, code)
	}
	if code, _ := request(t, "GET", srv.URL+"/api/v1/clients", other, "", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET without the token, Host %s: %d; want 401", other, code)
	}
	if code, _ := request(t, "POST", srv.URL+"/api/v1/publish", other, "http://"+other, token, `{"topic":"x"}`); code != http.StatusOK {
		t.Errorf("POST with the token from its own origin %s: %d; want 200", other, code)
	}
	if code, _ := request(t, "POST", srv.URL+"/api/v1/publish", other, "http://evil.example", token, `{"topic":"y"}`); code != http.StatusForbidden {
		t.Errorf("POST with the token from another origin: %d; want 403", code)
	}
	if want := []string{`x "" q0 rfalse`}; len(fb.published) != 1 || fb.published[0] != want[0] {
		t.Errorf("published %q; want %q", fb.published, want)
	}
}
