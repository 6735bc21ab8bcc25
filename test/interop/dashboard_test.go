package interop

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// TestDashboard loads the broker's dashboard in headless Chromium while paho clients
// publish at QoS 1: the page goes live, shows the listener and the protocol of the
// clients, and its figures move (messages in per second above zero, the total growing).
// With BIFROST_DASHBOARD_SCREENSHOT=FILE it saves a screenshot (docs/dashboard.png).
func TestDashboard(t *testing.T) {
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
	addr := "tcp://" + b.Addrs()[0].String()

	connect := func(id string) mqtt.Client {
		// No reconnects: paho.mqtt.golang v1.5.1's reconnect races (paho.mqtt.golang#703).
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(addr).SetClientID(id).SetProtocolVersion(4).SetAutoReconnect(false))
		if tok := c.Connect(); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
			t.Fatalf("%s: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(0) })
		return c
	}
	sub := connect("dash-sub")
	if tok := sub.Subscribe("dash/#", 1, func(mqtt.Client, mqtt.Message) {}); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	pub := connect("dash-pub")
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan struct{})
	go func() { // 50 QoS 1 messages a second until the test ends
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				pub.Publish("dash/"+strconv.Itoa(i%10), 1, false, "x").WaitTimeout(time.Second)
			}
		}
	}()
	defer func() { stop(); <-done }()

	page := openCDP(t, "http://"+b.HTTPAddr().String()+"/dashboard/")
	testenv.WaitFor(t, "the dashboard live", func() bool { return page.text(`document.getElementById("status").textContent`) == "live" })
	number := func(id string) float64 {
		s := page.text(`document.getElementById("` + id + `").textContent`)
		mult := 1.0
		switch {
		case strings.HasSuffix(s, "k"):
			s, mult = strings.TrimSuffix(s, "k"), 1e3
		case strings.HasSuffix(s, "M"):
			s, mult = strings.TrimSuffix(s, "M"), 1e6
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return -1
		}
		return v * mult
	}
	testenv.WaitFor(t, "messages in per second above zero", func() bool { return number("in-rate") > 0 })
	first := number("received")
	testenv.WaitFor(t, "the total of messages in growing", func() bool { return number("received") > first })
	if n := number("connections"); n != 2 {
		t.Errorf("connections shown: %v; want 2", n)
	}
	if got := page.text(`document.getElementById("t-listeners").textContent`); !strings.Contains(got, "mqtt") {
		t.Errorf("listeners table: %q", got)
	}
	if got := page.text(`document.getElementById("t-protocols").textContent`); !strings.Contains(got, "3.1.12") {
		t.Errorf("protocols table: %q; want 3.1.1 with 2", got)
	}
	if path := os.Getenv("BIFROST_DASHBOARD_SCREENSHOT"); path != "" {
		time.Sleep(10 * time.Second) // a screenshot with graphs, not a test's wait
		if err := os.WriteFile(path, page.screenshot(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
