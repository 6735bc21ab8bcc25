package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/clusterpb"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Node-to-node calls over gRPC (clusterpb/cluster.proto), on the gRPC path of the rpc port
// (net_mux.go). The server answers Status and, on the leader, Apply. Clients to peers are kept
// per peer and closed when the peer fails or leaves, or its address changes.
//
// gRPC is told nothing of TLS: with a secret, the mux does the server's handshake and the
// dialer below the client's, so both paths of the port share one implementation.

// rpcServer serves clusterpb.ClusterServer.
type rpcServer struct {
	clusterpb.UnimplementedClusterServer
	c *Cluster
}

// Status is this node's view of itself.
func (s rpcServer) Status(context.Context, *clusterpb.StatusRequest) (*clusterpb.StatusReply, error) {
	c := s.c
	leader, _ := c.Leader()
	return &clusterpb.StatusReply{
		Node:         c.cfg.NodeName,
		ClusterId:    c.ClusterID(),
		HasState:     c.hasState(),
		RaftState:    c.raft.State().String(),
		Leader:       leader,
		Term:         c.raft.CurrentTerm(),
		LastIndex:    c.raft.LastIndex(),
		CommitIndex:  c.raft.CommitIndex(),
		BootstrapSet: c.bootstrapSet(),
	}, nil
}

// Apply applies a forwarded command if this node leads.
func (s rpcServer) Apply(ctx context.Context, req *clusterpb.ApplyRequest) (*clusterpb.ApplyReply, error) {
	if req.ValidUntil != 0 && time.Now().UnixNano() >= req.ValidUntil {
		return nil, status.Error(codes.FailedPrecondition, "the forwarding node's lease ran out before its command arrived")
	}
	data, index, err := s.c.applyLocal(ctx, req.Command)
	var ae applyError
	switch {
	case errors.As(err, &ae):
		return &clusterpb.ApplyReply{Index: index, Error: ae.Error()}, nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		leader, _ := s.c.Leader()
		return nil, status.Errorf(codes.FailedPrecondition, "not the leader (the leader is %q): %v", leader, err)
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &clusterpb.ApplyReply{Index: index, Result: data}, nil
}

// peers keeps a gRPC client per peer.
type peers struct {
	tls *tls.Config // client settings; nil without a secret
	net Network

	mu     sync.Mutex
	conns  map[string]peerConn // by node name
	closed bool
}

type peerConn struct {
	addr string
	conn *grpc.ClientConn
	cl   clusterpb.ClusterClient
}

func newPeers(clientTLS *tls.Config, nw Network) *peers {
	return &peers{tls: clientTLS, net: nw, conns: map[string]peerConn{}}
}

// client returns the client of the peer named name at addr, connecting on first use.
func (p *peers) client(name, addr string) (clusterpb.ClusterClient, error) {
	if addr == "" {
		return nil, fmt.Errorf("cluster: %s has no rpc address", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if pc, ok := p.conns[name]; ok && pc.addr == addr {
		return pc.cl, nil
	} else if ok {
		_ = pc.conn.Close()
		delete(p.conns, name)
	}
	var conn *grpc.ClientConn
	var err error
	// gRPC's goroutines for this peer inherit the label of the goroutine that starts
	// them: the cluster's, whichever caller asked first.
	pprof.Do(context.Background(), pprof.Labels("bifrost", "cluster"), func(context.Context) {
		conn, err = grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(p.dial))
		if err == nil {
			conn.Connect()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: grpc client for %s: %w", name, err)
	}
	pc := peerConn{addr: addr, conn: conn, cl: clusterpb.NewClusterClient(conn)}
	p.conns[name] = pc
	return pc.cl, nil
}

// dial opens a connection to a peer's rpc port for gRPC, with the TLS handshake when there
// is a secret.
func (p *peers) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := p.net.Dial(ctx, addr)
	if err != nil || p.tls == nil {
		return c, err
	}
	tc := tls.Client(c, p.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cluster: rpc handshake with %s (is cluster.secret the same on both nodes?): %w", addr, err)
	}
	return tc, nil
}

// drop closes the client of a peer that failed or left.
func (p *peers) drop(name string) {
	p.mu.Lock()
	pc, ok := p.conns[name]
	delete(p.conns, name)
	p.mu.Unlock()
	if ok {
		_ = pc.conn.Close()
	}
}

// close closes every client; later calls to client fail.
func (p *peers) close() {
	p.mu.Lock()
	conns := p.conns
	p.conns, p.closed = nil, true
	p.mu.Unlock()
	for _, pc := range conns {
		_ = pc.conn.Close()
	}
}
