package conf

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestExampleBridgesBlock uncomments the sample file's bridges block: it must parse and
// validate, and every value it shows must be the default, except those it illustrates.
func TestExampleBridgesBlock(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "# bridges:") || len(block) > 0 && strings.HasPrefix(line, "#   ") {
			block = append(block, strings.TrimPrefix(line, "# "))
		} else if len(block) > 0 {
			break
		}
	}
	if len(block) == 0 {
		t.Fatalf("%s: no commented-out bridges block", exampleFile)
	}
	c, err := Parse([]byte(strings.Join(block, "\n")), exampleFile)
	if err != nil {
		t.Fatalf("the sample's bridges block:\n%s\n%v", strings.Join(block, "\n"), err)
	}
	d := Default()
	d.Bridges = []Bridge{{Name: "uplink", Address: "127.0.0.1:1884", TLS: &BridgeTLS{},
		Topics: []BridgeTopic{{Pattern: "sensors/#", QoS: 1}}}}
	d.EnsureDefaults()
	if !reflect.DeepEqual(c.Bridges, d.Bridges) {
		t.Fatalf("the sample's bridges block = %+v\nwant the defaults %+v", c.Bridges, d.Bridges)
	}
}

// TestBridgeValidate: each broken field is reported under its own path.
func TestBridgeValidate(t *testing.T) {
	good := func() Bridge {
		return Bridge{Name: "up", Address: "127.0.0.1:1884", Topics: []BridgeTopic{{Pattern: "a/#"}}}
	}
	cases := []struct {
		name, field string
		edit        func(b *Bridge)
	}{
		{"no-name", "bridges[0].name", func(b *Bridge) { b.Name = "" }},
		{"slash-in-name", "bridges[0].name", func(b *Bridge) { b.Name = "a/b" }},
		{"no-port", "bridges[0].address", func(b *Bridge) { b.Address = "127.0.0.1" }},
		{"no-host", "bridges[0].address", func(b *Bridge) { b.Address = ":1883" }},
		{"protocol", "bridges[0].protocol", func(b *Bridge) { b.Protocol = "3.1" }},
		{"keepalive", "bridges[0].keepalive_interval", func(b *Bridge) { b.KeepAlive = Duration(time.Second) }},
		{"restart-max", "bridges[0].restart_timeout_max", func(b *Bridge) {
			b.RestartTimeout, b.RestartTimeoutMax = Duration(10*time.Second), Duration(time.Second)
		}},
		{"password-alone-311", "bridges[0].remote_password", func(b *Bridge) { b.Protocol, b.Password = BridgeV311, "x" }},
		{"no-topics", "bridges[0].topics", func(b *Bridge) { b.Topics = nil }},
		{"pattern-empty", "bridges[0].topics[0].pattern", func(b *Bridge) { b.Topics[0].Pattern = "" }},
		{"pattern-hash-middle", "bridges[0].topics[0].pattern", func(b *Bridge) { b.Topics[0].Pattern = "a/#/b" }},
		{"pattern-plus-in-level", "bridges[0].topics[0].pattern", func(b *Bridge) { b.Topics[0].Pattern = "a+/b" }},
		{"shared", "bridges[0].topics[0].pattern", func(b *Bridge) { b.Topics[0].Pattern = "$share/g/a" }},
		{"direction", "bridges[0].topics[0].direction", func(b *Bridge) { b.Topics[0].Direction = "up" }},
		{"qos3", "bridges[0].topics[0].qos", func(b *Bridge) { b.Topics[0].QoS = 3 }},
		{"qos-negative", "bridges[0].topics[0].qos", func(b *Bridge) { b.Topics[0].QoS = -1 }},
		{"prefix-wildcard", "bridges[0].topics[0].local_prefix", func(b *Bridge) { b.Topics[0].LocalPrefix = "+/" }},
		{"tls-cert-alone", "bridges[0].tls", func(b *Bridge) { b.TLS = &BridgeTLS{CertFile: "c.pem"} }},
		{"inflight", "bridges[0].max_inflight", func(b *Bridge) { b.MaxInflight = 70000 }},
		{"queue-full", "bridges[0].queue_full", func(b *Bridge) { b.QueueFull = "drop_all" }},
		{"queue-messages", "bridges[0].queue_messages", func(b *Bridge) { b.QueueMessages = -1 }},
		{"notification-wildcard", "bridges[0].notification_topic", func(b *Bridge) { b.NotificationTopic = "x/#" }},
	}
	ok := Default()
	ok.Bridges = []Bridge{good()}
	ok.Bridges[0].Topics[0].QoS = 2
	ok.EnsureDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good bridge at QoS 2: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Bridges = []Bridge{good()}
			tc.edit(&c.Bridges[0])
			c.EnsureDefaults()
			err := c.Validate()
			var es *Errors
			if !errors.As(err, &es) {
				t.Fatalf("no error: %v", err)
			}
			for _, e := range es.List {
				if e.Field == tc.field {
					return
				}
			}
			t.Fatalf("no error on %s: %v", tc.field, err)
		})
	}
	c := Default()
	c.Bridges = []Bridge{good(), good()}
	c.EnsureDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "bridges[1].name") {
		t.Fatalf("a duplicate name: %v", err)
	}
}
