package bifrost_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// TestAdminRebinding is DNS rebinding against the default endpoint (loopback, no admin
// credentials): a page of rebind.attacker.test, its name re-pointed at 127.0.0.1, calls
// the API from the operator's browser, so its requests name the attacker's host in Host
// and Origin alike. Each is refused (421) and changes nothing: its publish never reaches
// a Paho subscriber, which receives the publish made next with a loopback Host first.
// Listings, the dashboard, metrics and pprof refuse such a request too; /healthz answers
// it.
func TestAdminRebinding(t *testing.T) {
	b, _ := start(t, testConfig(t))
	got := make(chan string, 10)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + b.Addrs()[0].String()).SetClientID("watcher").
		SetProtocolVersion(4).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(0)
	if tok := c.Subscribe("x", 1, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}

	const attacker = "rebind.attacker.test:8080"
	do := func(method, path, host, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+b.HTTPAddr().String()+path, strings.NewReader(body))
		if host != "" {
			req.Host = host
			req.Header.Set("Origin", "http://"+host)
		}
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testenv.Timeout}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}

	// The request: curl -X POST -H 'Host: rebind.attacker.test:8080' -H 'Origin:
	// http://rebind.attacker.test:8080' -d '{"topic":"x","payload":"y"}' .../api/v1/publish
	if code, body := do("POST", "/api/v1/publish", attacker, `{"topic":"x","payload":"y"}`); code != http.StatusMisdirectedRequest ||
		!strings.Contains(body, "http.allowed_hosts") {
		t.Errorf("POST /api/v1/publish with Host %s: %d %s; want 421 naming http.allowed_hosts", attacker, code, body)
	}
	for _, path := range []string{"/api/v1/clients", "/api/v1/config", "/dashboard/", "/metrics", "/load", "/debug/pprof/cmdline"} {
		if code, body := do("GET", path, attacker, ""); code != http.StatusMisdirectedRequest {
			t.Errorf("GET %s with Host %s: %d %.200s; want 421", path, attacker, code, body)
		}
	}
	if code, _ := do("GET", "/healthz", attacker, ""); code != http.StatusOK {
		t.Errorf("GET /healthz with Host %s: %d; want 200 (probes use any name)", attacker, code)
	}
	for _, host := range []string{"", "localhost:8080", "[::1]:8080"} {
		if code, body := do("GET", "/api/v1/clients", host, ""); code != http.StatusOK {
			t.Errorf("GET /api/v1/clients with Host %q: %d %s; want 200", host, code, body)
		}
	}

	if code, body := do("POST", "/api/v1/publish", "", `{"topic":"x","payload":"z"}`); code != http.StatusOK {
		t.Fatalf("POST /api/v1/publish with a loopback Host: %d %s", code, body)
	}
	select {
	case m := <-got:
		if m != "z" {
			t.Errorf("the subscriber received %q first; want the loopback publish %q (the rebound one delivered)", m, "z")
		}
	case <-time.After(testenv.Timeout):
		t.Fatal("the subscriber received nothing")
	}
}
