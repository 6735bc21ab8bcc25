package bifrost

import (
	"errors"
	"fmt"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/conf"
)

// The authentication hook for embedders: a Go program that hosts the broker may decide
// CONNECTs itself (WithAuthenticator) instead of, or before adding, a password file.
type (
	// Authenticator decides a CONNECT; Authenticate may block (it runs on a small pool
	// of goroutines, never on an event loop) and returns ErrBadCredentials or
	// ErrNotAuthorized to refuse.
	Authenticator = auth.Authenticator
	// AuthRequest is what a client presents at CONNECT.
	AuthRequest = auth.Request
	// AuthResult is who the client is: Username is its identity for the ACL, and the
	// owner of the sessions it makes (docs/admin.md, "Who owns a session").
	AuthResult = auth.Result
	// AuthMethod is an MQTT 5 enhanced authentication method.
	AuthMethod = auth.Method
	// AuthExchange is one enhanced authentication conversation of an AuthMethod.
	AuthExchange = auth.Exchange
)

// The errors an Authenticator refuses with.
var (
	ErrBadCredentials = auth.ErrBadCredentials // CONNACK 0x86 (3.1.1: 4)
	ErrNotAuthorized  = auth.ErrNotAuthorized  // CONNACK 0x87 (3.1.1: 5)
)

// WithAuthenticator makes a decide every CONNECT in place of the configuration's password
// files (the ACL file still applies), and offers methods for MQTT 5 enhanced
// authentication.
func WithAuthenticator(a Authenticator, methods ...AuthMethod) Option {
	return func(b *Broker) { b.hook, b.hookMethods = a, methods }
}

// HashPassword returns the record of password for an Auth.PasswordFile, whose lines read
// user:record: a bcrypt hash at the default cost, as `bifrost passwd` writes it. password
// is 1 to 72 bytes.
func HashPassword(password string) (string, error) { return auth.HashPassword([]byte(password), 0) }

// security builds what the broker asks who may connect and what they may touch: the
// auth blocks of the configuration (auth.Set: password files, ACL files, SCRAM), or the
// embedder's Authenticator. It refuses a configuration that would let anonymous clients
// in from the network without the operator saying so (conf.Config.CheckExposure), and
// logs the exposure the operator chose.
func (b *Broker) security() (broker.Security, map[string]broker.Security, error) {
	cfg := b.cfg
	if b.hook == nil {
		if err := cfg.CheckExposure(); err != nil {
			return broker.Security{}, nil, fmt.Errorf("refusing to serve anonymous clients on the network:\n%w", err)
		}
	}
	for i, l := range cfg.Listeners {
		if a := cfg.ListenerAuth(i); b.hook == nil && a.Anonymous() && a.AllowAnonymous != nil && !conf.IsLoopback(l.Address) {
			b.log.Warn("listener open to anonymous clients from the network (auth.allow_anonymous: true)",
				"listener", l.Name, "address", l.Address)
		}
	}
	set, err := auth.NewSet(cfg, b.log)
	if err != nil {
		return broker.Security{}, nil, err
	}
	b.auth = set
	top := broker.Security{Authenticator: set, Methods: set.Methods(), Authorizer: set.For("")}
	if cfg.Cluster != nil && b.hook == nil { // cluster_auth.go
		b.gate = newAuthGate(set)
		top.Authenticator, top.Methods = b.gate, b.gate.methods(top.Methods)
	}
	if b.hook != nil {
		top.Authenticator, top.Methods, top.Remote = b.hook, b.hookMethods, true
	}
	own := make(map[string]broker.Security)
	for _, l := range cfg.Listeners {
		if l.Auth != nil {
			s := top
			s.Authorizer = set.For(l.Name)
			own[l.Name] = s
		}
	}
	return top, own, nil
}

// ReloadFiles re-reads what the configuration names and the broker may change live: the
// password and ACL files, and the TLS certificates. On a cluster node the password and
// ACL files are proposed to the cluster, and every node puts them in force. Clients
// connected keep their session; subscriptions judged under the old ACL have their
// deliveries checked under the new one.
// What fails to load keeps its previous state; the errors come back together.
func (b *Broker) ReloadFiles() error {
	var errs []error
	switch {
	case b.auth != nil && b.cluster != nil:
		// The cluster's log decides (cluster_auth.go); each node, this one included, puts
		// the files in force as it applies them.
		if err := b.reloadClusterAuth(); err != nil {
			errs = append(errs, err)
		}
	case b.auth != nil:
		if err := b.auth.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			b.mqtt.ACLChanged()
		}
	}
	if err := b.mqtt.ReloadTLS(); err != nil {
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if err != nil {
		b.log.Error("reload of auth and TLS files failed; the previous state stays", "err", err)
	} else {
		b.log.Info("auth and TLS files reloaded")
	}
	return err
}
