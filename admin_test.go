package bifrost_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// TestAdminAPI: with a password file and an admin user, the API refuses calls without
// credentials and with a user who is not an admin, lists a real client, shows its
// detail, and disconnects it: the paho client is closed (its connection lost), and the
// log says who did it.
func TestAdminAPI(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwd")
	hash, err := auth.HashPassword([]byte("s3cret"), 4)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, pw, "root:"+hash+"\nalice:"+hash+"\n")
	cfg := testConfig(t)
	cfg.Listeners = cfg.Listeners[:1]
	cfg.Auth.PasswordFile = pw
	cfg.HTTP.Admin.Users = []string{"root"}
	b, logs := start(t, cfg)
	base := "http://" + b.HTTPAddr().String() + "/api/v1"
	call := func(method, path, user string, body ...string) (int, string) {
		t.Helper()
		var rd io.Reader
		if len(body) > 0 {
			rd = strings.NewReader(body[0])
		}
		req, _ := http.NewRequest(method, base+path, rd)
		if user != "" {
			req.SetBasicAuth(user, "s3cret")
		}
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}

	lost := make(chan error, 1)
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + b.Addrs()[0].String()).SetClientID("dev-1").
		SetUsername("alice").SetPassword("s3cret").SetProtocolVersion(4).SetAutoReconnect(false).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { lost <- err })
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)

	if code, _ := call("GET", "/clients", ""); code != 401 {
		t.Errorf("no credentials: %d; want 401", code)
	}
	if code, _ := call("GET", "/clients", "alice"); code != 401 {
		t.Errorf("a user who is not an admin: %d; want 401", code)
	}
	code, body := call("GET", "/clients?client_id_prefix=dev-", "root")
	var page struct {
		Data []struct {
			ClientID string `json:"client_id"`
			Username string `json:"username"`
			Listener string `json:"listener"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.Data) != 1 ||
		page.Data[0].ClientID != "dev-1" || page.Data[0].Username != "alice" || page.Data[0].Listener != "mqtt" {
		t.Fatalf("clients: %d %s", code, body)
	}
	if code, body := call("GET", "/clients/dev-1", "root"); code != 200 || !strings.Contains(body, `"keep_alive": 30`) {
		t.Errorf("detail: %d %s", code, body)
	}
	if code, body := call("GET", "/config", "root"); code != 200 || !strings.Contains(body, `"password_file": "`+pw+`"`) {
		t.Errorf("config: %d %s", code, body)
	}
	// Retained messages: set through the API, listed, read, cleared.
	if code, body := call("POST", "/publish", "root", `{"topic":"site/a/temp","payload":"21.5","qos":1,"retain":true}`); code != 200 {
		t.Fatalf("publish: %d %s", code, body)
	}
	if code, body := call("GET", "/retained?filter=site/%2B/temp", "root"); code != 200 || !strings.Contains(body, `"topic": "site/a/temp"`) {
		t.Errorf("retained list: %d %s", code, body)
	}
	if code, body := call("GET", "/retained/site/a/temp", "root"); code != 200 || !strings.Contains(body, `"payload": "21.5"`) {
		t.Errorf("retained read: %d %s", code, body)
	}
	if code, _ := call("DELETE", "/retained/site/a/temp", "root"); code != 204 {
		t.Errorf("retained delete: %d", code)
	}
	if code, _ := call("GET", "/retained/site/a/temp", "root"); code != 404 {
		t.Errorf("retained read after delete: %d; want 404", code)
	}
	// Who a topic reaches.
	if tok := c.Subscribe("site/+/temp", 1, nil); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	if code, body := call("GET", "/subscribers?topic=site/b/temp", "root"); code != 200 || !strings.Contains(body, `"client_id": "dev-1"`) {
		t.Errorf("subscribers: %d %s", code, body)
	}
	if code, body := call("DELETE", "/clients/dev-1", "root"); code != 204 {
		t.Fatalf("disconnect: %d %s", code, body)
	}
	select {
	case <-lost:
	case <-time.After(testenv.Timeout):
		t.Fatal("the client was not disconnected")
	}
	testenv.WaitFor(t, "dev-1 gone from the listing", func() bool {
		_, body := call("GET", "/clients", "root")
		return !strings.Contains(body, "dev-1")
	})
	if !strings.Contains(logs.String(), `msg="admin: client disconnected" by=user:root client=dev-1 reason=0x98`) {
		t.Errorf("the disconnect is not in the log with who made it:\n%s", logs)
	}
}

// TestAdminAPIOffLoopbackNeedsCredentials: on an address off loopback with no admin users
// or tokens the API stays off, and the log says why.
func TestAdminAPIOffLoopbackNeedsCredentials(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTP.Address = "0.0.0.0:0"
	b, logs := start(t, cfg)
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: b.HTTPAddr().(*net.TCPAddr).Port}
	if code, body, err := get(t, local, "/api/v1/clients"); err != nil || code != 404 || strings.Contains(body, "error") {
		t.Errorf("the API answered off loopback without credentials: %d %q %v", code, body, err)
	}
	if code, _, err := get(t, local, "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz: %d %v", code, err)
	}
	if !strings.Contains(logs.String(), "admin API off") {
		t.Errorf("no word of the API being off:\n%s", logs)
	}
}
