package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The rpc port carries gRPC and Raft: one TCP port per node for all node-to-node traffic,
// as the operator opens one port in a firewall. The mux accepts every connection and
// reads its first byte: prefixRaft, which only our Raft dialer writes (net_transport.go),
// sends it to Raft; anything else (gRPC's HTTP/2 preface "PRI * HTTP/2.0", or a TLS
// ClientHello) to the gRPC server. With a secret, both paths then speak TLS with the
// authority derived from it (net_secret.go), and a peer without it is refused here.

// prefixRaft is the first byte of a Raft connection.
const prefixRaft = 'R'

// handshakeTimeout bounds the first byte and the TLS handshake of an accepted connection,
// so that a peer that connects and says nothing does not hold a goroutine for long.
const handshakeTimeout = 10 * time.Second

// A mux serves the rpc listener.
type mux struct {
	ln   net.Listener
	tls  *tls.Config // server settings; nil without a secret
	log  *slog.Logger
	goFn func(name string, f func(context.Context)) bool

	raft *connQueue // Raft's listener (net_transport.go)
	grpc *connQueue // the gRPC server's listener

	refused atomic.Uint64 // connections refused at the handshake
}

func newMux(ln net.Listener, tlsConf *tls.Config, log *slog.Logger, goFn func(string, func(context.Context)) bool) *mux {
	return &mux{ln: ln, tls: tlsConf, log: log, goFn: goFn, raft: newConnQueue(ln.Addr()), grpc: newConnQueue(ln.Addr())}
}

// serve accepts until the listener is closed; each connection is routed on a goroutine of
// its own, which ends once it is handed over or refused.
func (m *mux) serve(ctx context.Context) {
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or the like: back off as net/http does, then retry.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.log.Warn("cluster: rpc accept failed; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-ctx.Done():
				return
			}
		}
		delay = 0
		if !m.goFn("cluster rpc handshake", func(ctx context.Context) { m.route(ctx, c) }) {
			_ = c.Close()
		}
	}
}

// route reads c's first byte, shakes hands when there is a secret, and queues c for Raft
// or gRPC.
func (m *mux) route(ctx context.Context, c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		m.log.Debug("cluster: rpc connection closed before its first byte", "remote", c.RemoteAddr(), "err", err)
		_ = c.Close()
		return
	}
	to, path := m.grpc, "grpc"
	if first[0] == prefixRaft {
		to, path = m.raft, "raft"
	} else {
		c = &prefixConn{Conn: c, prefix: first[:]}
	}
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			m.refused.Add(1)
			m.log.Warn("cluster: refused an rpc connection: the peer does not hold this cluster's secret",
				"remote", c.RemoteAddr(), "path", path, "err", err)
			_ = c.Close()
			return
		}
		c = tc
	}
	_ = c.SetDeadline(time.Time{})
	if !to.put(ctx, c) {
		_ = c.Close()
	}
}

// close stops accepting and closes both paths' listeners.
func (m *mux) close() error {
	err := m.ln.Close()
	m.raft.Close()
	m.grpc.Close()
	return err
}

// prefixConn gives back the byte the mux read before handing the connection on.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// A connQueue is a net.Listener fed by the mux. It closes the connections it handed out
// when it is closed: Raft's transport leaves a goroutine reading each inbound connection
// until its peer closes it, and the peer may be closing too.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	open map[*queuedConn]struct{} // handed out, not closed
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{}), open: map[*queuedConn]struct{}{}}
}

// queuedConn is a connection a connQueue handed out.
type queuedConn struct {
	net.Conn
	q *connQueue
}

func (c *queuedConn) Close() error {
	c.q.mu.Lock()
	delete(c.q.open, c)
	c.q.mu.Unlock()
	return c.Conn.Close()
}

// put hands c to Accept; false once the queue or ctx is closed.
func (q *connQueue) put(ctx context.Context, c net.Conn) bool {
	qc := &queuedConn{Conn: c, q: q}
	q.mu.Lock()
	q.open[qc] = struct{}{}
	q.mu.Unlock()
	select {
	case q.ch <- qc:
		return true
	case <-q.done:
	case <-ctx.Done():
	}
	q.mu.Lock()
	delete(q.open, qc)
	q.mu.Unlock()
	return false
}

// Accept returns the next connection the mux routed here.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept return net.ErrClosed and closes the connections handed out; the
// mux's listener stays the mux's.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	q.mu.Lock()
	open := q.open
	q.open = map[*queuedConn]struct{}{}
	q.mu.Unlock()
	for c := range open {
		_ = c.Conn.Close()
	}
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
