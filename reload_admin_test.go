package bifrost_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// TestReloadAdminAccess: the admin users and the token file take effect on a reload,
// without a restart: a token removed from the file is refused after POST /api/v1/reload,
// the new one is taken, the report and the log name the change but never a token, a user
// added to http.admin.users gets in after a reload (SIGHUP's Reload) and is refused once
// removed again, and a bad token file changes nothing and says what is wrong.
func TestReloadAdminAccess(t *testing.T) {
	dir := t.TempDir()
	const (
		oldTok = "old-token-0123456789"
		newTok = "new-token-9876543210"
	)
	tokens, pw, file := filepath.Join(dir, "tokens"), filepath.Join(dir, "passwd"), filepath.Join(dir, "bifrost.yaml")
	hash, err := auth.HashPassword([]byte("s3cret"), 4)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, pw, "root:"+hash+"\n")
	base := "store:\n  dir: off\nlisteners:\n  - name: a\n    type: tcp\n    address: 127.0.0.1:0\n" +
		"auth:\n  password_file: " + pw + "\n  allow_anonymous: true\nhttp:\n  address: 127.0.0.1:0\n  admin:\n    token_file: " + tokens + "\n"
	writeFile(t, tokens, "ops "+oldTok+"\n")
	writeFile(t, file, base)
	cfg, err := bifrost.LoadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	b, err := bifrost.New(cfg, bifrost.WithConfigFile(file), bifrost.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	call := func(method, path string, auth func(*http.Request)) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+b.HTTPAddr().String()+"/api/v1"+path, nil)
		auth(req)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	root := func(r *http.Request) { r.SetBasicAuth("root", "s3cret") }
	want := func(what string, a func(*http.Request), code int) {
		t.Helper()
		if got, body := call("GET", "/listeners", a); got != code {
			t.Fatalf("%s: %d %s; want %d", what, got, body, code)
		}
	}
	want("the old token before the reload", bearer(oldTok), 200)
	want("the new token before the reload", bearer(newTok), 401)
	want("root before it is an admin", root, 401)

	writeFile(t, tokens, "deploy "+newTok+"\n")
	code, body := call("POST", "/reload", bearer(oldTok))
	var resp struct {
		Report bifrost.Report `json:"report"`
	}
	if err := json.Unmarshal([]byte(body), &resp); code != 200 || err != nil {
		t.Fatalf("reload: %d %s", code, body)
	}
	if len(resp.Report.Applied) != 1 || resp.Report.Applied[0] != (bifrost.ConfigChange{Field: "http.admin.tokens", Old: "ops", New: "deploy"}) {
		t.Errorf("report: %s; want the tokens' change ops → deploy alone", body)
	}
	want("the old token after the reload", bearer(oldTok), 401)
	want("the new token after the reload", bearer(newTok), 200)

	// A user added to http.admin.users, on the reload SIGHUP makes.
	writeFile(t, file, base+"    users: [root]\n")
	rep, err := b.Reload()
	if err != nil || len(rep.Applied) != 1 || rep.Applied[0].Field != "http.admin.users" {
		t.Fatalf("reload adding root: %+v %v", rep, err)
	}
	want("root once an admin", root, 200)
	want("the token beside root", bearer(newTok), 200)

	// A bad token file: nothing of the reload changes (root stays an admin, the token
	// stays), and the error names the file and the line.
	writeFile(t, file, base)
	writeFile(t, tokens, "# ops\ndeploy short\n")
	if _, err := b.Reload(); err == nil || !strings.Contains(err.Error(), tokens+":2") {
		t.Fatalf("reload with a bad token file: %v; want an error naming %s:2", err, tokens)
	}
	want("root after a failed reload", root, 200)
	want("the token after a failed reload", bearer(newTok), 200)

	writeFile(t, tokens, "deploy "+newTok+"\n")
	if rep, err := b.Reload(); err != nil || len(rep.Applied) != 1 || rep.Applied[0].Field != "http.admin.users" {
		t.Fatalf("reload removing root: %+v %v", rep, err)
	}
	want("root once removed", root, 401)

	log := logs.String()
	for _, s := range []string{`msg="reconfigure: admin access" users_added=[] users_removed=[] tokens_added=[deploy] tokens_removed=[ops]`,
		`users_added=[root]`, `users_removed=[root]`} {
		if !strings.Contains(log, s) {
			t.Errorf("the log has no %q:\n%s", s, log)
		}
	}
	if strings.Contains(log, oldTok) || strings.Contains(log, newTok) {
		t.Errorf("a token is in the log:\n%s", log)
	}
}

// TestReconfigureAdminOffLoopback: off loopback, a reconfiguration that would leave the
// running API without credentials is refused and changes nothing; with the API off (no
// credentials at start), credentials added wait for a restart and the report says so.
func TestReconfigureAdminOffLoopback(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "ops old-token-0123456789\n")

	cfg := liveConfig(t)
	cfg.HTTP.Address = "0.0.0.0:0"
	cfg.HTTP.Admin.TokenFile = tokens
	b, _ := start(t, cfg)
	next := cfg.Clone()
	next.HTTP.Admin.TokenFile = ""
	if _, err := b.Reconfigure(next); err == nil || !strings.Contains(err.Error(), "without credentials") {
		t.Errorf("credentials removed off loopback: %v; want a refusal", err)
	}
	if rep, err := b.Reconfigure(cfg); err != nil || len(rep.Applied)+len(rep.Restart) != 0 {
		t.Errorf("the first config again after the refusal: %+v %v; want nothing changed", rep, err)
	}

	off := liveConfig(t)
	off.HTTP.Address = "0.0.0.0:0"
	b, _ = start(t, off)
	next = off.Clone()
	next.HTTP.Admin.TokenFile = tokens
	rep, err := b.Reconfigure(next)
	if err != nil || len(rep.Applied) != 0 || len(rep.Restart) != 1 || rep.Restart[0].Field != "http.admin.token_file" ||
		!strings.Contains(rep.Restart[0].Restart, "admin API is off") {
		t.Errorf("credentials for an API that is off: %+v %v; want http.admin.token_file left for a restart", rep, err)
	}
}
