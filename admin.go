package bifrost

import (
	"go.yaml.in/yaml/v3"

	"github.com/bifrost-mqtt/bifrost/internal/admin"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// startAdmin mounts the admin API (internal/admin) on the HTTP endpoint, unless it would
// be open off loopback: then it stays off and the log says why. It reports whether it
// runs.
func (b *Broker) startAdmin(srv *metrics.Server) bool {
	cfg := b.cfg.HTTP.Admin
	if len(cfg.Users) == 0 && cfg.TokenFile == "" && !conf.IsLoopback(b.cfg.HTTP.Address) {
		b.log.Warn("admin API off: http.address is not on loopback and http.admin names no users or token_file")
		return false
	}
	acc, err := admin.NewAccess(cfg.Users, cfg.TokenFile, b.checkAdmin)
	if err != nil {
		b.log.Error("admin API off", "err", err)
		return false
	}
	b.admin.Store(acc)
	o := admin.Options{Broker: b.mqtt, Access: acc, Log: b.log, Reload: func() (any, error) { return b.Reload() }, Config: b.maskedConfig,
		Metrics: b.metrics, Source: b.mqtt,
		Listeners: func() []admin.Listener {
			var out []admin.Listener
			for _, l := range b.mqtt.Listeners() {
				out = append(out, admin.Listener{Name: l.Name(), Type: l.Type(), Address: l.Addr().String(), Connections: l.Conns()})
			}
			return out
		}}
	if b.cluster != nil {
		o.Nodes = b.metrics.Nodes
		o.Cluster = b.cluster
		o.Owner = func(cid string) (string, string) {
			node, _ := b.cluster.Owner(cid)
			return node, b.cluster.NodeName()
		}
	}
	admin.Register(srv, o)
	return true
}

// checkAdmin verifies an admin's password against the top-level password file.
func (b *Broker) checkAdmin(user string, password []byte) bool {
	if b.auth == nil {
		return false
	}
	res, err := b.auth.Authenticate(&auth.Request{Username: user, HasUsername: true, Password: password, HasPassword: true})
	return err == nil && res.Username == user
}

// maskedConfig is the configuration in force as the file's keys, with every secret
// replaced by "***".
func (b *Broker) maskedConfig() any {
	out, err := yaml.Marshal(b.running.Load())
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	var m map[string]any
	if err := yaml.Unmarshal(out, &m); err != nil {
		return map[string]string{"error": err.Error()}
	}
	if c, ok := m["cluster"].(map[string]any); ok && c["secret"] != "" {
		c["secret"] = "***"
	}
	if bs, ok := m["bridges"].([]any); ok {
		for _, br := range bs {
			if br, ok := br.(map[string]any); ok && br["remote_password"] != "" {
				br["remote_password"] = "***"
			}
		}
	}
	return m
}
