package bifrost_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// TestLoadReportsConnectionCap: GET /load reports the connection cap in force, the one a
// load balancer divides the connections by, on a broker started with defaults and with
// the caps set.
func TestLoadReportsConnectionCap(t *testing.T) {
	ptr := func(n int) *int { return &n }
	for _, tc := range []struct {
		name string
		tune func(c *bifrost.Config)
		want int64
	}{
		{"defaults", nil, 1_000_000},
		{"edge-profile", func(c *bifrost.Config) { c.Memory.Profile, c.Limits.MaxConnections = "edge", nil }, 10_000},
		{"max-connections=500", func(c *bifrost.Config) { c.Limits.MaxConnections = ptr(500) }, 500},
		{"no-cap", func(c *bifrost.Config) { c.Limits.MaxConnections = ptr(0) }, 0},
		{"no-cap,listeners=300+200", func(c *bifrost.Config) {
			c.Limits.MaxConnections = ptr(0)
			c.Listeners[0].MaxConnections, c.Listeners[1].MaxConnections = 300, 200
		}, 500},
		{"max-connections=400,listeners=300+200", func(c *bifrost.Config) {
			c.Limits.MaxConnections = ptr(400)
			c.Listeners[0].MaxConnections, c.Listeners[1].MaxConnections = 300, 200
		}, 400},
		{"max-connections=1000,listeners=300+uncapped", func(c *bifrost.Config) {
			c.Limits.MaxConnections = ptr(1000)
			c.Listeners[0].MaxConnections = 300
		}, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if len(cfg.Listeners) != 2 {
				t.Fatalf("the default config has %d listeners, the cases assume 2", len(cfg.Listeners))
			}
			if tc.tune != nil {
				tc.tune(cfg)
			}
			b, _ := start(t, cfg)
			code, body, err := get(t, b.HTTPAddr(), "/load")
			if err != nil || code != http.StatusOK {
				t.Fatalf("GET /load = %d, %v", code, err)
			}
			var got struct {
				Load           float64 `json:"load"`
				Connections    *int64  `json:"connections"`
				MaxConnections *int64  `json:"max_connections"`
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("/load body %q: %v", body, err)
			}
			want := broker.ConnectionCap(tc.want) // within the open-file limit's room
			if got.MaxConnections == nil || *got.MaxConnections != want {
				t.Errorf("max_connections in %s, want %d", body, want)
			}
			if got.Connections == nil || *got.Connections != 0 {
				t.Errorf("connections in %s, want 0", body)
			}
		})
	}
}
