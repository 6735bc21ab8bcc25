// Package bifrost embeds the bifrost MQTT broker in a Go program: build a Broker from a
// Config, Start it, publish and subscribe in-process, Close it. The bifrost binary
// (cmd/bifrost) is a thin shell around the same API.
package bifrost

import (
	"context"
	"errors"
	"net"

	"github.com/bifrost-mqtt/bifrost/internal/server"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// A Broker is one bifrost instance. Its methods are safe for concurrent use.
type Broker struct {
	srv  *server.Server
	opts server.Options // what New's Options chose
}

// New returns a Broker for cfg, not yet started. A nil cfg means DefaultConfig(). New works
// on a copy, with unset fields filled by their defaults, and reports every invalid field at
// once; the caller may change or reuse cfg afterwards. A cfg whose HTTP.Address is not
// HTTPOff needs the endpoint linked (import _ "github.com/bifrost-mqtt/bifrost/endpoint"),
// and a cluster block the cluster; New refuses either without it, naming the import.
func New(cfg *Config, opts ...Option) (*Broker, error) {
	b := &Broker{}
	for _, opt := range opts {
		opt(b)
	}
	srv, err := server.New(cfg, b.opts)
	if err != nil {
		return nil, err
	}
	b.srv = srv
	return b, nil
}

// Start opens the store and restores what it holds (unless store.dir is off), starts the
// cluster part (with a cluster block: membership, the rpc port and Raft; the cluster
// forms in the background), then starts the bridges (each connects to its remote in the
// background), opens the MQTT listeners and opens the HTTP endpoint. It
// returns once they accept connections (Addrs and HTTPAddr are then set) or with the
// error that prevented it (a store that is corrupt, foreign or locked by another process
// among them); after an error, Close the Broker. ctx bounds the start only: the broker
// runs until Close. With the edge profile, Start then hands the executable's start-up
// pages back to the kernel (memory.ReleaseCode): in the whole process, on Linux.
func (b *Broker) Start(ctx context.Context) error { return b.srv.Start(ctx) }

// Close stops the broker gracefully: each bridge sends its remote DISCONNECT and stops,
// the listeners stop accepting, every client is disconnected (MQTT 5 clients are told the
// server is shutting down), a cluster node leaves its cluster (up to about 5s while the leader takes it out), /healthz turns to
// 503, HTTP requests in flight get up to 5s to finish (long ones such as a CPU profile are
// cut short), and Close returns once every goroutine the broker started has ended.
// Close may be called more than once, and before Start; later calls return nil.
func (b *Broker) Close() error { return b.srv.Close() }

// HTTPAddr returns the address of the HTTP endpoint, with the port chosen when the config
// says 0; nil before Start and when the endpoint is off.
func (b *Broker) HTTPAddr() net.Addr { return b.srv.HTTPAddr() }

// Addrs returns the address of every MQTT listener, in config order, with the ports chosen
// when the config says 0; nil before Start.
func (b *Broker) Addrs() []net.Addr { return b.srv.Addrs() }

// Publish publishes a message from the embedding program, with the broker as publisher.
// The payload is copied; retain and QoS mean what they mean for a client's PUBLISH.
func (b *Broker) Publish(topic string, payload []byte, qos byte, retain bool) error {
	return b.srv.Publish(topic, payload, qos, retain)
}

// Subscribe calls fn for every message published to a topic that filter matches (a
// shared subscription's filter too: $share/group/filter), with its QoS, retain flag and
// properties. fn runs on the publisher's goroutine, often one of the broker's network
// event loops, and on several at once for messages of different publishers: it must be
// safe for concurrent use and return quickly, without blocking. What of m it may keep
// past its return: see Message. The returned function ends the subscription; calling it
// again does nothing.
func (b *Broker) Subscribe(filter string, fn func(m Message)) (unsubscribe func(), err error) {
	if fn == nil {
		return nil, errors.New("bifrost: Subscribe without a function")
	}
	return b.srv.Subscribe(filter, func(m *session.Message, qos uint8, retain bool) { fn(message(m, qos, retain)) })
}

// A Report says what Reconfigure did: the changes applied, and those that need a
// restart and were not applied.
type Report struct {
	Applied []ConfigChange `json:"applied"`
	Restart []ConfigChange `json:"restart"`
}

// Reconfigure puts next in force on the running broker, as far as that can be done
// without a restart, and reports what changed. next is checked first, as New checks its
// config: an invalid one (or one that would expose anonymous clients to the network)
// changes nothing and comes back as the error. Otherwise every live change is applied
// and every change that needs a restart (store, cluster, http.address, memory.profile...)
// is reported and left as it is: the broker runs with next's live fields over the
// configuration it had, and a later Reconfigure reports the pending ones again until a
// restart. Mosquitto does the same on SIGHUP (applies what it can, logs the rest); the
// alternative, refusing the whole file, would make an operator who fixes a limit and
// also touches store.dir restart for both. The fields and how each takes effect:
// docs/admin.md, Live reconfiguration. The admin API's token file is read again at
// every call. Calls are serialized. It needs a started
// broker (ErrNotStarted before Start, ErrClosed after Close).
func (b *Broker) Reconfigure(next *Config) (Report, error) {
	rep, err := b.srv.Reconfigure(next)
	return Report(rep), err
}

// Reload reads the configuration file again (WithConfigFile) and Reconfigures the broker
// with it (which re-reads the admin token file), then re-reads the password, ACL and
// certificate files (ReloadFiles). Without a file it Reconfigures with the configuration
// in force, for the token file, then does the latter. cmd/bifrost calls it on SIGHUP,
// the admin API on POST /api/v1/reload. A file with an error changes nothing: the error
// names each problem as check-config does (file:line: field: message).
func (b *Broker) Reload() (Report, error) {
	rep, err := b.srv.Reload()
	return Report(rep), err
}

// ReloadFiles re-reads what the configuration names and the broker may change live: the
// password and ACL files, and the TLS certificates. On a cluster node the password and
// ACL files are proposed to the cluster, and every node puts them in force. Clients
// connected keep their session; subscriptions judged under the old ACL have their
// deliveries checked under the new one.
// What fails to load keeps its previous state; the errors come back together.
func (b *Broker) ReloadFiles() error { return b.srv.ReloadFiles() }
