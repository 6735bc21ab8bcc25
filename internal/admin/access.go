package admin

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// Who authenticates r against acc and returns the caller's name for the audit log:
// auth.Anonymous when acc asks for no credentials.
func Who(acc *auth.AdminAccess, r *http.Request) (string, error) {
	var c auth.Credentials
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		c.Token, c.HasToken = strings.TrimSpace(h[len("Bearer "):]), true
	} else {
		c.User, c.Password, c.HasUser = r.BasicAuth()
	}
	return acc.Who(c)
}

// Hosts is the endpoint's defence against DNS rebinding: which Host headers a request
// without admin credentials may carry (docs/admin.md, "Who may reach what"). A page of
// the attacker's site, its name re-pointed at 127.0.0.1, calls a loopback endpoint from
// the operator's browser with the attacker's name in Host (and in Origin, which then
// matches). A Host that is an IP address or localhost cannot come from another site's
// page, nor can a name the operator lists (http.allowed_hosts); any other is refused.
// A request with valid admin credentials passes whatever its Host: a page of another
// site cannot send them. The zero Hosts lists no names.
type Hosts struct {
	names []string // lower case: "name" for any port, "name:port" for that one
}

// NewHosts returns the rule with allowed, http.allowed_hosts, besides IP addresses and
// localhost.
func NewHosts(allowed []string) Hosts {
	h := Hosts{names: make([]string, len(allowed))}
	for i, n := range allowed {
		h.names[i] = strings.ToLower(n)
	}
	return h
}

// Allow reports whether host, a request's Host header, names the endpoint: an IP
// address, localhost, or a listed name, each with a port or without. An empty Host (an
// HTTP/1.0 probe) is allowed: no browser sends one. localhost's subdomains are not:
// some clients resolve them through DNS.
func (h Hosts) Allow(host string) bool {
	if host == "" {
		return true
	}
	host = strings.ToLower(host)
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // no port
	}
	if _, err := netip.ParseAddr(name); err == nil || name == "localhost" {
		return true
	}
	for _, n := range h.names {
		if n == name || n == host {
			return true
		}
	}
	return false
}

// HostRefused is what a request refused by Hosts is told.
func HostRefused(host string) string {
	return fmt.Sprintf("Host %q does not name this endpoint: a request without admin credentials must name it "+
		"by an IP address, localhost, or a name of http.allowed_hosts", host)
}
