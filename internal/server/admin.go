package server

import (
	"go.yaml.in/yaml/v3"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// What the admin API (internal/admin, mounted by the HTTP endpoint) asks of the server.

// checkAdmin verifies an admin's password against the top-level password file.
func (b *Server) checkAdmin(user string, password []byte) bool {
	if b.auth == nil {
		return false
	}
	res, err := b.auth.Authenticate(&auth.Request{Username: user, HasUsername: true, Password: password, HasPassword: true})
	return err == nil && res.Username == user
}

// maskedConfig is the configuration in force as the file's keys, with every secret
// replaced by "***".
func (b *Server) maskedConfig() any {
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
