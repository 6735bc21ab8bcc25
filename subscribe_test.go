package bifrost_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/paho"
)

// TestSubscribeMessage: a message an MQTT 5 client publishes at QoS 1, retained and with
// properties, reaches Subscribe's callback with its QoS, retain flag and properties, and
// a Clone kept past the callback still has them; one from Publish has its QoS, no retain
// flag and no properties.
func TestSubscribeMessage(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTP.Address, cfg.Store.Dir = bifrost.HTTPOff, bifrost.StoreOff
	b, _ := start(t, cfg)
	type delivery struct {
		kept  bifrost.Message    // the callback's Clone
		props bifrost.Properties // Properties as the callback read them
	}
	got := make(chan delivery, 4)
	unsubscribe, err := b.Subscribe("plant/#", func(m bifrost.Message) {
		got <- delivery{m.Clone(), m.Properties()}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()

	c := mqtttest.Dial(t, b.Addrs()[0].String(), "publisher")
	format, expiry := byte(1), uint32(60)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.Timeout)
	defer cancel()
	sent := time.Now()
	if _, err := c.Paho.Publish(ctx, &paho.Publish{Topic: "plant/boiler/temp", QoS: 1, Retain: true,
		Payload: []byte(`{"c":81.5}`), Properties: &paho.PublishProperties{
			PayloadFormat: &format, MessageExpiry: &expiry, ContentType: "application/json",
			ResponseTopic: "plant/boiler/reply", CorrelationData: []byte{0, 1, 2},
			User: paho.UserProperties{{Key: "site", Value: "north"}, {Key: "site", Value: "south"}, {Key: "unit", Value: "C"}},
		}}); err != nil {
		t.Fatal(err)
	}
	want := bifrost.Properties{PayloadFormat: 1, ContentType: "application/json", ResponseTopic: "plant/boiler/reply",
		CorrelationData: []byte{0, 1, 2},
		User:            []bifrost.UserProperty{{Key: "site", Value: "north"}, {Key: "site", Value: "south"}, {Key: "unit", Value: "C"}}}
	var d delivery
	select {
	case d = <-got:
	case <-time.After(testenv.Timeout):
		t.Fatal("the callback got nothing")
	}
	if m := d.kept; m.Topic != "plant/boiler/temp" || string(m.Payload) != `{"c":81.5}` || m.QoS != 1 || !m.Retain {
		t.Fatalf("callback got %q %q QoS %d retain %v; want plant/boiler/temp, QoS 1, retained", m.Topic, m.Payload, m.QoS, m.Retain)
	}
	for name, p := range map[string]bifrost.Properties{"in the callback": d.props, "of the Clone": d.kept.Properties()} {
		if e := p.Expiry; e.Before(sent.Add(59*time.Second)) || e.After(time.Now().Add(60*time.Second)) {
			t.Errorf("expiry %s: %v; want 60 s after %v", name, e, sent)
		}
		p.Expiry = time.Time{}
		if !reflect.DeepEqual(p, want) {
			t.Errorf("properties %s:\n%+v\nwant\n%+v", name, p, want)
		}
	}

	if err := b.Publish("plant/boiler/mode", []byte("eco"), 2, false); err != nil {
		t.Fatal(err)
	}
	select {
	case d = <-got:
	case <-time.After(testenv.Timeout):
		t.Fatal("the callback got nothing")
	}
	if m := d.kept; m.Topic != "plant/boiler/mode" || string(m.Payload) != "eco" || m.QoS != 2 || m.Retain ||
		!reflect.DeepEqual(d.props, bifrost.Properties{}) {
		t.Fatalf("callback got %q %q QoS %d retain %v %+v; want the broker's message at QoS 2, no properties",
			m.Topic, m.Payload, m.QoS, m.Retain, d.props)
	}
	if _, err := b.Subscribe("plant/#", nil); err == nil {
		t.Error("Subscribe without a function accepted")
	}
}

// BenchmarkSubscribe: Publish to an in-process subscriber that does not look at the
// properties, against Publish alone (Subs=0).
func BenchmarkSubscribe(b *testing.B) {
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address, cfg.Store.Dir = bifrost.HTTPOff, bifrost.StoreOff
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0"
	}
	br, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	if err := br.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	payload := bytes.Repeat([]byte("x"), 128)
	for _, subs := range []int{0, 1} {
		b.Run(fmt.Sprintf("Subs=%d", subs), func(b *testing.B) {
			n := 0
			if subs > 0 {
				unsubscribe, err := br.Subscribe("bench/#", func(m bifrost.Message) { n += len(m.Payload) })
				if err != nil {
					b.Fatal(err)
				}
				defer unsubscribe()
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := br.Publish("bench/sensor/1", payload, 0, false); err != nil {
					b.Fatal(err)
				}
			}
			if subs > 0 && n == 0 {
				b.Fatal("nothing delivered")
			}
		})
	}
}
