package cluster

import (
	"context"
	"net"

	"github.com/hashicorp/memberlist"
)

// A Network carries a node's cluster traffic: the rpc port's connections (Raft and gRPC,
// net_mux.go) and gossip. Options.Network nil is the host's (tcpNetwork); the package's
// tests run clusters on an in-memory one whose links they cut, so that a partition is a
// test fixture. Its methods are called from any goroutine.
type Network interface {
	// Listen opens this node's rpc port on addr (cluster.rpc). The listener's address is
	// host:port, the port the one bound.
	Listen(addr string) (net.Listener, error)
	// Dial opens a stream connection to addr: a peer's rpc port, or its gossip port to
	// see that it answers (member_rejoin.go). ctx bounds the dial, not the connection.
	Dial(ctx context.Context, addr string) (net.Conn, error)
	// Gossip sets memberlist's transport in c before memberlist starts; leaving
	// c.Transport nil has memberlist make its own, UDP and TCP on c.BindAddr and
	// c.BindPort.
	Gossip(c *memberlist.Config) error
}

// tcpNetwork is the host's network: TCP on the rpc port, memberlist's own transport on
// cluster.bind.
type tcpNetwork struct{}

func (tcpNetwork) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func (tcpNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (tcpNetwork) Gossip(*memberlist.Config) error { return nil }
