package server

import (
	"errors"
	"fmt"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// security builds what the broker asks who may connect and what they may touch: the
// auth blocks of the configuration (auth.Set: password files, ACL files, SCRAM), or the
// embedder's Options.Authenticator. It refuses a configuration that would let anonymous
// clients in from the network without the operator saying so (conf.Config.CheckExposure),
// and logs the exposure the operator chose.
func (b *Server) security() (broker.Security, map[string]broker.Security, error) {
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
	if cfg.Cluster != nil && b.hook == nil { // opened by the cluster node (startCluster)
		b.gate = auth.NewGate(set)
		top.Authenticator, top.Methods = b.gate, b.gate.Methods(top.Methods)
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
func (b *Server) ReloadFiles() error {
	var errs []error
	switch {
	case b.auth != nil && b.cluster != nil:
		// The cluster's log decides; each node, this one included, puts the files in
		// force as it applies them.
		if err := b.cluster.ReloadAuth(b.ctx); err != nil {
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
