package conf

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// validate checks the http block's access fields: the values of metrics and pprof, that
// "admin" has credentials to ask for, and that each allowed host is a name, with a port
// or without, as a Host header carries it.
func (h *HTTP) validate(errs *errorList) {
	creds := len(h.Admin.Users) > 0 || h.Admin.TokenFile != ""
	if oneOf(errs, "http.metrics", h.Metrics, HTTPOpen, HTTPAdmin) && h.Metrics == HTTPAdmin && !creds {
		errs.add("http.metrics", "admin needs http.admin.users or http.admin.token_file")
	}
	if oneOf(errs, "http.pprof", h.PProf, HTTPAuto, HTTPOpen, HTTPAdmin, HTTPOff) && h.PProf == HTTPAdmin && !creds {
		errs.add("http.pprof", "admin needs http.admin.users or http.admin.token_file")
	}
	for i, host := range h.AllowedHosts {
		if msg := badHost(host); msg != "" {
			errs.add(fmt.Sprintf("http.allowed_hosts[%d]", i), "%q: %s", host, msg)
		}
	}
}

// badHost says what is wrong with an allowed host, "" when nothing is.
func badHost(host string) string {
	if host == "" {
		return "empty"
	}
	if strings.ContainsAny(host, "/@*?# \t") {
		return `want a name as a Host header gives it ("broker.example" or "broker.example:8080"), without scheme, path or wildcard`
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
			return "not a name, nor name:port"
		}
		return ""
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Sprintf("port %q is not a number in 1..65535", port)
	}
	if name == "" {
		return "no name before the port"
	}
	return ""
}
