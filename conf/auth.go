package conf

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
)

// Anonymous reports whether clients without a username are admitted under a: as set, or,
// when allow_anonymous is unset, only when there is no password file.
func (a *Auth) Anonymous() bool {
	if a.AllowAnonymous != nil {
		return *a.AllowAnonymous
	}
	return a.PasswordFile == ""
}

// ListenerAuth returns the auth block in force on listener i: its own, or the top-level
// one.
func (c *Config) ListenerAuth(i int) Auth {
	if a := c.Listeners[i].Auth; a != nil {
		return *a
	}
	return c.Auth
}

// CheckExposure applies the safe-defaults rule: a listener that clients on the network can
// reach must not admit anonymous clients by default. It reports, as *Errors naming each
// listener's address, every listener bound to something other than loopback whose auth
// block has no password_file and leaves allow_anonymous unset, unless it requires client
// certificates (tls.client_ca_file). Setting allow_anonymous: true says the exposure is
// meant; a password_file closes it. The broker calls it before serving; Validate does
// not, so that tests and tools may bind where they like.
//
// A host name other than localhost counts as exposed: conf does not resolve names.
func (c *Config) CheckExposure() error {
	var errs errorList
	for i, l := range c.Listeners {
		a := c.ListenerAuth(i)
		certs := l.TLS != nil && l.TLS.ClientCAFile != ""
		if a.PasswordFile != "" || a.AllowAnonymous != nil || certs || IsLoopback(l.Address) {
			continue
		}
		block := "auth"
		if l.Auth != nil {
			block = fmt.Sprintf("listeners[%d].auth", i)
		}
		errs.add(fmt.Sprintf("listeners[%d].address", i),
			"%q (listener %s) is reachable from the network and would admit anonymous clients: set %s.password_file, or %s.allow_anonymous: true if that is meant",
			l.Address, l.Name, block, block)
	}
	return errs.err()
}

// IsLoopback reports whether addr (host:port) binds only the loopback interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ensureDefaults fills an auth block's zero fields from the profile's block d.
// allow_anonymous stays unset: unset has its own meaning (see Auth).
func (a *Auth) ensureDefaults(d *Auth) {
	if a.CacheSize == nil && d.CacheSize != nil {
		a.CacheSize = ptr(*d.CacheSize) // each block its own pointer: Clone keeps them apart
	}
	orDefault(&a.CacheTTL, d.CacheTTL)
	orDefault(&a.ForeignSession, d.ForeignSession)
}

// clone returns a deep copy of a; nil for nil.
func (a *Auth) clone() *Auth {
	if a == nil {
		return nil
	}
	n := *a
	n.AllowAnonymous = clonePtr(a.AllowAnonymous)
	n.CacheSize = clonePtr(a.CacheSize)
	n.ClientIDs = slices.Clone(a.ClientIDs)
	return &n
}

// validateAuth checks the top-level auth block and each listener's. Whether the files
// exist and parse is the auth package's business: conf does not read them.
func (c *Config) validateAuth(errs *errorList) {
	c.Auth.validate(errs, "auth")
	for i, l := range c.Listeners {
		if l.Auth != nil {
			l.Auth.validate(errs, fmt.Sprintf("listeners[%d].auth", i))
		}
	}
	// A listener whose block refuses anonymous clients and has no password file admits
	// nobody, unless client certificates may identify its clients.
	reported := map[string]bool{}
	for i, l := range c.Listeners {
		a := c.ListenerAuth(i)
		if a.AllowAnonymous == nil || *a.AllowAnonymous || a.PasswordFile != "" || l.TLS != nil && l.TLS.ClientCAFile != "" {
			continue
		}
		field := "auth.allow_anonymous"
		if l.Auth != nil {
			field = fmt.Sprintf("listeners[%d].auth.allow_anonymous", i)
		}
		if !reported[field] {
			reported[field] = true
			errs.add(field, "false, and there is no password_file: no client could connect to listener %s", l.Name)
		}
	}
}

// validate checks the settings of an auth block found at path (auth, or
// listeners[i].auth).
func (a *Auth) validate(errs *errorList, path string) {
	if a.CacheSize != nil {
		between(errs, path+".cache_size", *a.CacheSize, 0, math.MaxInt32)
	}
	positive(errs, path+".cache_ttl", a.CacheTTL)
	if a.ForeignSession != "" { // unset: the default, discard
		oneOf(errs, path+".foreign_session", a.ForeignSession, ForeignDiscard, ForeignRefuse)
	}
	for i, p := range a.ClientIDs {
		if err := CheckClientIDPattern(p); err != nil {
			errs.add(fmt.Sprintf("%s.client_ids[%d]", path, i), "%q: %v", p, err)
		}
	}
}

// CheckClientIDPattern checks a pattern of Auth.ClientIDs: text in which %u stands for
// the user name, with at most one *, as its last character, for any suffix.
func CheckClientIDPattern(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return errors.New("* is allowed only at the end")
	case strings.Contains(strings.ReplaceAll(p, "%u", ""), "%"):
		return errors.New("% may only be followed by u (%u, the user name)")
	}
	return nil
}
