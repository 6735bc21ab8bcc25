package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestMaskedConfig: the admin API's config shows the file's keys and never the cluster
// secret.
func TestMaskedConfig(t *testing.T) {
	cfg := conf.Default()
	cfg.Cluster = &conf.Cluster{NodeName: "n1", Secret: "a-very-secret-cluster-key"}
	b := &Server{cfg: cfg}
	b.running.Store(cfg)
	out, err := json.Marshal(b.maskedConfig())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "a-very-secret") || !strings.Contains(string(out), `"secret":"***"`) ||
		!strings.Contains(string(out), `"node_name":"n1"`) {
		t.Errorf("config: %s", out)
	}
}

// TestMaskedConfigBridges: nor a bridge's remote password.
func TestMaskedConfigBridges(t *testing.T) {
	cfg := conf.Default()
	cfg.Bridges = []conf.Bridge{{Name: "up", Address: "127.0.0.1:1884", Username: "site",
		Password: "a-very-secret-password", Topics: []conf.BridgeTopic{{Pattern: "a/#"}}}}
	b := &Server{cfg: cfg}
	b.running.Store(cfg)
	out, err := json.Marshal(b.maskedConfig())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "a-very-secret") || !strings.Contains(string(out), `"remote_password":"***"`) ||
		!strings.Contains(string(out), `"remote_username":"site"`) {
		t.Errorf("config: %s", out)
	}
}
