package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// fakeBroker holds sessions by client id, in order; its cursor is an index + 1.
type fakeBroker struct {
	sessions  []broker.SessionInfo
	kicked    map[string]packet.ReasonCode
	published []string
}

func (f *fakeBroker) Retained(filter string, offset, limit int) ([]broker.RetainedInfo, bool) {
	all := []broker.RetainedInfo{{Topic: "t/x", Size: 2}, {Topic: "t/y", Size: 3}, {Topic: "u", Size: 1}}
	var out []broker.RetainedInfo
	for _, r := range all[min(offset, len(all)):] {
		if filter == "#" || strings.HasPrefix(r.Topic, strings.TrimSuffix(filter, "#")) {
			out = append(out, r)
		}
	}
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

func (f *fakeBroker) RetainedMessage(topic string) (broker.RetainedInfo, bool) {
	if topic != "t/x" {
		return broker.RetainedInfo{}, false
	}
	p := "hi"
	return broker.RetainedInfo{Topic: topic, Payload: &p, Size: 2}, true
}

func (f *fakeBroker) Subscribers(topic string, limit int) []broker.SubscriberInfo {
	return []broker.SubscriberInfo{{ClientID: "a1", QoS: 1}}
}

func (f *fakeBroker) Publish(topic string, payload []byte, qos uint8, retain bool) error {
	f.published = append(f.published, fmt.Sprintf("%s %q q%d r%v", topic, payload, qos, retain))
	return nil
}

func (f *fakeBroker) Sessions(cursor uint32, limit int, flt broker.SessionFilter) ([]broker.SessionInfo, uint32) {
	var out []broker.SessionInfo
	i := int(max(cursor, 1)) - 1
	for ; i < len(f.sessions) && len(out) < limit; i++ {
		s := f.sessions[i]
		if strings.HasPrefix(s.ClientID, flt.Prefix) && (!flt.Online || s.Online) {
			out = append(out, s)
		}
	}
	if i < len(f.sessions) {
		return out, uint32(i + 1)
	}
	return out, 0
}

func (f *fakeBroker) Session(cid string) (broker.SessionInfo, bool) {
	for _, s := range f.sessions {
		if s.ClientID == cid {
			return s, true
		}
	}
	return broker.SessionInfo{}, false
}

func (f *fakeBroker) Kick(cid string, rc packet.ReasonCode) bool {
	if s, ok := f.Session(cid); !ok || !s.Online {
		return false
	}
	f.kicked[cid] = rc
	return true
}

func newAPI(t *testing.T, acc *auth.AdminAccess) (*httptest.Server, *fakeBroker, *bytes.Buffer) {
	t.Helper()
	return newAPIHosts(t, acc, Hosts{})
}

// newAPIHosts is newAPI with hosts as http.allowed_hosts.
func newAPIHosts(t *testing.T, acc *auth.AdminAccess, hosts Hosts) (*httptest.Server, *fakeBroker, *bytes.Buffer) {
	t.Helper()
	fb := &fakeBroker{kicked: map[string]packet.ReasonCode{}, sessions: []broker.SessionInfo{
		{ClientID: "a1", Online: true, Protocol: "5.0"},
		{ClientID: "a2", Online: false, Persistent: true, Protocol: "3.1.1"},
		{ClientID: "b1", Online: true, Protocol: "3.1.1"},
	}}
	var logs bytes.Buffer
	mux := http.NewServeMux()
	Register(mux, Options{Broker: fb, Access: acc, Hosts: hosts, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Listeners: func() []Listener {
			return []Listener{{Name: "mqtt", Type: "tcp", Address: "127.0.0.1:1883", Connections: 2}}
		}})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, fb, &logs
}

func call(t *testing.T, method, url string, header http.Header) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if len(body) > 0 {
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s %s: not JSON: %q", method, url, body)
		}
	}
	return resp.StatusCode, v
}

// TestOpenAPIMatchesRoutes: openapi.json names exactly the routes the API serves, and each
// of them reaches its own handler, not the JSON 404 of unknown routes.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	var served []string
	for _, r := range routes {
		served = append(served, strings.ReplaceAll(r, "...}", "}")) // OpenAPI has no {x...}
	}
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("openapi.json documents\n%v\nthe API serves\n%v", documented, served)
	}
	// The listings' shapes: each schema's properties are the JSON fields of the type the
	// API writes.
	var schemas struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &schemas); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"Page": page{}, "Session": item{}} {
		var documented []string
		for p := range schemas.Components.Schemas[name].Properties {
			documented = append(documented, p)
		}
		slices.Sort(documented)
		if fields := jsonFields(reflect.TypeOf(v)); !slices.Equal(documented, fields) {
			t.Errorf("openapi.json's %s has %v; the API writes %v", name, documented, fields)
		}
	}
	srv, _, _ := newAPI(t, &auth.AdminAccess{})
	for _, r := range routes {
		method, path, _ := strings.Cut(r, " ")
		path = strings.ReplaceAll(strings.ReplaceAll(path, "{id}", "a1"), "{topic...}", "t/x")
		code, body := call(t, method, srv.URL+path, nil)
		if e, ok := body["error"].(map[string]any); code == http.StatusNotFound && ok &&
			strings.HasPrefix(e["message"].(string), "no such route") {
			t.Errorf("%s: answered by the unknown-route handler", r)
		}
	}
	if code, body := call(t, "GET", srv.URL+"/api/v1/nothing", nil); code != 404 || body["error"] == nil {
		t.Errorf("unknown route: %d %v; want a JSON 404", code, body)
	}
}

// jsonFields returns the sorted JSON names of t's fields, an embedded struct's included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			out = append(out, jsonFields(f.Type)...)
		case name != "-" && f.IsExported():
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestAccess: with a token file or admin users, a call without credentials, with a wrong
// token or a user who is not an admin is refused (401, JSON); a right one passes.
func TestAccess(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# operators\nops 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	acc, err := auth.NewAdminAccess([]string{"root"}, tokens, func(user string, pw []byte) bool { return string(pw) == user+"-pw" })
	if err != nil {
		t.Fatal(err)
	}
	srv, _, _ := newAPI(t, acc)
	basic := func(u, p string) http.Header {
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(u, p)
		return r.Header
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		want int
	}{
		{"none", nil, 401},
		{"wrong token", http.Header{"Authorization": {"Bearer 0123456789abcdef0124"}}, 401},
		{"token", http.Header{"Authorization": {"Bearer 0123456789abcdef0123"}}, 200},
		{"admin", basic("root", "root-pw"), 200},
		{"admin, wrong password", basic("root", "nope"), 401},
		{"not an admin", basic("alice", "alice-pw"), 401},
	} {
		code, body := call(t, "GET", srv.URL+"/api/v1/clients", tc.h)
		if code != tc.want || code == 401 && body["error"] == nil {
			t.Errorf("%s: %d %v; want %d", tc.name, code, body, tc.want)
		}
	}
	if err := os.WriteFile(tokens, []byte("ops short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.ReadTokens(tokens); err == nil || !strings.Contains(err.Error(), tokens+":1") {
		t.Errorf("a short token: %v; want an error naming the file and line", err)
	}
}

// TestClientsAndKick: listings page with the cursor they give, details and the disconnect
// answer as documented, and a bad request changes nothing.
func TestClientsAndKick(t *testing.T) {
	srv, fb, logs := newAPI(t, &auth.AdminAccess{})
	code, body := call(t, "GET", srv.URL+"/api/v1/clients?limit=1", nil)
	if code != 200 || len(body["data"].([]any)) != 1 || body["next"] == nil {
		t.Fatalf("first page: %d %v", code, body)
	}
	var ids []string
	next := ""
	for range 5 {
		url := srv.URL + "/api/v1/sessions?limit=1"
		if next != "" {
			url += "&cursor=" + next
		}
		_, body := call(t, "GET", url, nil)
		for _, d := range body["data"].([]any) {
			ids = append(ids, d.(map[string]any)["client_id"].(string))
		}
		n, ok := body["next"].(string)
		if !ok {
			break
		}
		next = n
	}
	if !slices.Equal(ids, []string{"a1", "a2", "b1"}) {
		t.Errorf("sessions a page at a time: %v", ids)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=!!", "connected=maybe"} {
		if code, body := call(t, "GET", srv.URL+"/api/v1/sessions?"+q, nil); code != 400 || body["error"] == nil {
			t.Errorf("%s: %d %v; want a JSON 400", q, code, body)
		}
	}
	if code, _ := call(t, "GET", srv.URL+"/api/v1/clients/a2", nil); code != 404 {
		t.Errorf("detail of an offline client under /clients: %d; want 404", code)
	}
	if code, body := call(t, "GET", srv.URL+"/api/v1/sessions/a2", nil); code != 200 || body["persistent"] != true {
		t.Errorf("detail of a2's session: %d %v", code, body)
	}

	if code, _ := call(t, "DELETE", srv.URL+"/api/v1/clients/a1?reason=0x04", nil); code != 400 || len(fb.kicked) != 0 {
		t.Errorf("a client's reason code: %d, kicked %v; want 400 and nothing", code, fb.kicked)
	}
	if code, _ := call(t, "DELETE", srv.URL+"/api/v1/clients/a2", nil); code != 404 {
		t.Errorf("kick of an offline client: %d; want 404", code)
	}
	if code, _ := call(t, "DELETE", srv.URL+"/api/v1/clients/a1?reason=0x89", nil); code != 204 || fb.kicked["a1"] != packet.ServerBusy {
		t.Errorf("kick: %d, kicked %v", code, fb.kicked)
	}
	if !strings.Contains(logs.String(), `msg="admin: client disconnected" by="anonymous (loopback)" client=a1 reason=0x89`) {
		t.Errorf("the disconnect is not logged with who made it:\n%s", logs)
	}
	if code, _ := call(t, "DELETE", srv.URL+"/api/v1/clients/b1", http.Header{"Origin": {"http://evil.example"}}); code != 403 || len(fb.kicked) != 1 {
		t.Errorf("a change from another origin: %d, kicked %v; want 403 and nothing more", code, fb.kicked)
	}
	if code, body := call(t, "POST", srv.URL+"/api/v1/reload", nil); code != 501 || body["error"] == nil {
		t.Errorf("reload without a Reload: %d %v", code, body)
	}
}

// TestPublish: a publish request reaches the broker as given (text or base64 payload);
// a bad one is refused with a JSON 400 and publishes nothing.
func TestPublish(t *testing.T) {
	srv, fb, logs := newAPI(t, &auth.AdminAccess{})
	post := func(body string) int {
		resp, err := http.Post(srv.URL+"/api/v1/publish", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, bad := range []string{`{}`, `{"topic":"a/#"}`, `{"topic":"a","qos":3}`, `{"topic":"a","payload":"x","payload_base64":"eA=="}`,
		`{"topic":"a","payload_base64":"!"}`, `{"topic":"a","extra":1}`, `not json`} {
		if code := post(bad); code != 400 {
			t.Errorf("%s: %d; want 400", bad, code)
		}
	}
	if len(fb.published) != 0 {
		t.Fatalf("bad requests published %v", fb.published)
	}
	if post(`{"topic":"a/b","payload":"hi","qos":1,"retain":true}`) != 200 || post(`{"topic":"c","payload_base64":"AAE="}`) != 200 {
		t.Fatal("a good publish refused")
	}
	want := []string{`a/b "hi" q1 rtrue`, `c "\x00\x01" q0 rfalse`}
	if !slices.Equal(fb.published, want) {
		t.Errorf("published %q; want %q", fb.published, want)
	}
	if !strings.Contains(logs.String(), `msg="admin: published" by="anonymous (loopback)" topic=a/b`) {
		t.Errorf("the publish is not logged:\n%s", logs)
	}
}
