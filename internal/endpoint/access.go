package endpoint

import (
	"errors"
	"net/http"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/admin"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// access is who may use the endpoint's own routes (docs/admin.md, "Who may reach what").
// A route open without credentials (conf.HTTPOpen) serves a request whose Host names the
// endpoint (admin.Hosts: the defence against DNS rebinding) or that brings valid admin
// credentials, and answers 421 to others. A route behind the admin credentials
// (conf.HTTPAdmin) serves only a request that brings them, whatever its Host, and
// answers 401 to others, so that a browser asks for them. /healthz is neither: it
// answers every request. The admin API applies the same rule in its own guard.
type access struct {
	acc   *auth.AdminAccess // nil: no credentials to check (none configured, or the token file did not load)
	hosts admin.Hosts
}

// errNoAdmin is the refusal of credentials when there are none to check them against.
var errNoAdmin = errors.New("no admin credentials are in force (http.admin)")

// wrap puts h behind the rule of mode, conf.HTTPAdmin or (any other) conf.HTTPOpen.
func (a access) wrap(mode string, h http.Handler) http.Handler {
	if mode == conf.HTTPAdmin {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := a.credentials(r); err != nil {
				w.Header().Set("WWW-Authenticate", `Basic realm="bifrost admin", charset="UTF-8"`)
				refuse(w, http.StatusUnauthorized, err.Error())
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.hosts.Allow(r.Host) && a.credentials(r) != nil {
			refuse(w, http.StatusMisdirectedRequest, admin.HostRefused(r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// credentials checks the admin credentials r brings; nil when they are valid.
func (a access) credentials(r *http.Request) error {
	if a.acc == nil {
		return errNoAdmin
	}
	who, err := admin.Who(a.acc, r)
	if err == nil && who == auth.Anonymous {
		return errNoAdmin
	}
	return err
}

// refuse answers status with why, as text.
func refuse(w http.ResponseWriter, status int, why string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(why + "\n"))
}
