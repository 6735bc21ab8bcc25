package admin

import (
	"net/http"
	"strings"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// who authenticates r against acc and returns the caller's name for the audit log.
func who(acc *auth.AdminAccess, r *http.Request) (string, error) {
	var c auth.Credentials
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		c.Token, c.HasToken = strings.TrimSpace(h[len("Bearer "):]), true
	} else {
		c.User, c.Password, c.HasUser = r.BasicAuth()
	}
	return acc.Who(c)
}
