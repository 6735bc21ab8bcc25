package interop

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// TestBrowserRebinding is DNS rebinding in a real browser: headless Chromium resolves
// rebind.attacker.test to 127.0.0.1 (--host-resolver-rules, as the attacker's DNS does
// once its page has loaded) and opens the broker's dashboard by that name, and the
// page's own script posts to /api/v1/publish, same-origin as far as the browser knows.
// The broker, with the default access (loopback, no admin credentials), refuses the
// page and the publish (421), which never reaches a Paho subscriber: the publish made
// next by the broker's address is the first it receives.
func TestBrowserRebinding(t *testing.T) {
	cfg := bifrost.DefaultConfig()
	cfg.Store.Dir = t.TempDir()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Listeners = []bifrost.Listener{{Name: "mqtt", Type: "tcp", Address: "127.0.0.1:0"}}
	b, err := bifrost.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	got := make(chan string, 10)
	sub := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + b.Addrs()[0].String()).SetClientID("rebind-sub").SetProtocolVersion(4))
	if tok := sub.Connect(); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	t.Cleanup(func() { sub.Disconnect(0) })
	if tok := sub.Subscribe("rebind/x", 1, func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}

	_, port, _ := net.SplitHostPort(b.HTTPAddr().String())
	host := "rebind.attacker.test:" + port
	page := openCDP(t, "http://"+host+"/dashboard/", "--host-resolver-rules=MAP rebind.attacker.test 127.0.0.1")
	testenv.WaitFor(t, "the page of "+host+" loaded", func() bool {
		return page.text(`location.host`) == host && page.text(`document.readyState`) == "complete"
	})
	if body := page.text(`document.body.innerText`); !strings.Contains(body, "does not name this endpoint") {
		t.Errorf("the dashboard by the name %s shows %.200q; want the broker's refusal", host, body)
	}
	status := page.await(`fetch("/api/v1/publish", {method: "POST", body: JSON.stringify({topic: "rebind/x", payload: "y"})}).then(r => r.status)`)
	if status != "421" {
		t.Errorf("the page's POST /api/v1/publish: %s; want 421", status)
	}

	resp, err := http.Post("http://"+b.HTTPAddr().String()+"/api/v1/publish", "application/json", strings.NewReader(`{"topic":"rebind/x","payload":"z"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /api/v1/publish by the broker's address: %s", resp.Status)
	}
	select {
	case m := <-got:
		if m != "z" {
			t.Errorf("the subscriber received %q first; want %q (the page's publish went through)", m, "z")
		}
	case <-time.After(testenv.Timeout):
		t.Fatal("the subscriber received nothing")
	}
}
