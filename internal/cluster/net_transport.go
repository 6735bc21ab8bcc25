package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft's transport: raft.NetworkTransport (its wire format, connection pool and
// pipelining) over a stream layer that shares the rpc port with gRPC. Accept takes what
// the mux routed to Raft; Dial writes prefixRaft, then shakes hands as the mux expects.

// Raft transport settings, with their reasons.
const (
	// raftMaxPool is how many idle connections to one peer Raft keeps: replication,
	// heartbeats and a vote may overlap.
	raftMaxPool = 3
	// raftIOTimeout is Raft's I/O deadline per call (scaled up for snapshots): far above
	// a WAN round trip, far below what would hold a dead peer's call for long.
	raftIOTimeout = 10 * time.Second
)

// A streamLayer is raft.StreamLayer on the mux.
type streamLayer struct {
	*connQueue
	// ctx ends when the node closes: it cancels dials, which would otherwise hold Raft's
	// Shutdown for their whole timeout (a vote asked of a peer behind a partition).
	ctx       context.Context
	net       Network
	advertise string      // what this node's Raft address is, as peers dial it
	tls       *tls.Config // client settings; nil without a secret
}

// Addr is the advertised address: Raft compares it with the configuration's addresses.
func (s *streamLayer) Addr() net.Addr { return advertisedAddr(s.advertise) }

// Dial opens a Raft connection to a peer's rpc port.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(s.ctx, timeout)
	c, err := s.net.Dial(dctx, string(address))
	cancel()
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{prefixRaft}); err != nil {
		_ = c.Close()
		return nil, err
	}
	if s.tls != nil {
		tc := tls.Client(c, s.tls)
		if err := tc.HandshakeContext(s.ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("cluster: raft handshake with %s (is cluster.secret the same on both nodes?): %w", address, err)
		}
		c = tc
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// advertisedAddr is an address given as a string.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// An addressBook tells Raft where a server is now: its rpc address from gossip, which
// follows a node that came back on another address; Raft falls back to the address in
// its configuration.
type addressBook func(id raft.ServerID) (raft.ServerAddress, bool)

func (f addressBook) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := f(id); ok {
		return a, nil
	}
	return "", fmt.Errorf("cluster: %s is not a live member", id)
}

// newTransport returns Raft's transport on the mux's Raft path; its dials end with ctx.
func newTransport(ctx context.Context, m *mux, nw Network, advertise string, clientTLS *tls.Config, book addressBook, log hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		ServerAddressProvider: book,
		Logger:                log,
		Stream:                &streamLayer{connQueue: m.raft, ctx: ctx, net: nw, advertise: advertise, tls: clientTLS},
		MaxPool:               raftMaxPool,
		Timeout:               raftIOTimeout,
	})
}
