package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc/test/bufconn"
)

// A memNet is an in-memory network for the package's tests, node(name) the Network of
// each node on it, so that a partition is a test fixture, with no port and no root.
// The rpc port's connections are pairs of gRPC's bufconn pipes (buffered, with deadlines,
// as TCP is), from a registry of listeners by address; the Raft transport, the mux and
// gRPC above them are the production ones. Gossip runs on a transport of its own,
// addressed and delivered as memberlist's MockNetwork does, but with a lock (MockNetwork's
// maps have none, and nodes start while others gossip) and with UDP's loss: a packet for
// a member whose queue is full is dropped, where MockNetwork's unbuffered send would hold
// the sender's packet handler, which may be the one the receiver waits for.
//
// A cut link (partition, cut) carries nothing: gossip packets across it are dropped, and
// stream connections (rpc, and gossip's TCP-like streams) are refused and, when the cut
// comes, closed, both ends, with whatever they had buffered. heal ends every cut.
type memNet struct {
	// tune, when set, changes each node's memberlist configuration before it starts
	// (shorter timeouts); set before any node starts.
	tune func(*memberlist.Config)

	mu        sync.Mutex
	cuts      map[[2]string]bool      // (from, to) node names: to gets nothing from from
	listeners map[string]*memListener // the rpc ports, by address
	gossipers map[string]*memGossip   // the gossip transports, by address, those shut down too
	links     map[*memLink]struct{}   // open stream connections
	port      int                     // the last port handed out, rpc or gossip
	refused   int                     // stream connections refused at a cut
}

// memBasePort is below the first port a memNet hands out: addresses look like loopback
// ones, and no two are alike.
const memBasePort = 20000

// gossipQueue is how many packets a member's gossip transport holds before it drops
// (its socket buffer).
const gossipQueue = 1024

var (
	errCut     = errors.New("memnet: link cut")
	errRefused = errors.New("memnet: connection refused")
)

func newMemNet() *memNet {
	return &memNet{cuts: map[[2]string]bool{}, listeners: map[string]*memListener{},
		gossipers: map[string]*memGossip{}, links: map[*memLink]struct{}{}}
}

// node returns the Network of the node named name; nil on a nil memNet (the host's
// network).
func (n *memNet) node(name string) Network {
	if n == nil {
		return nil
	}
	return memNode{n: n, name: name}
}

// partition cuts every link between nodes of different sides, both ways, and heals
// every other: nodes named on no side keep all their links.
func (n *memNet) partition(sides ...[]string) {
	cuts := map[[2]string]bool{}
	for i, a := range sides {
		for j, b := range sides {
			for _, from := range a {
				for _, to := range b {
					if i != j {
						cuts[[2]string{from, to}] = true
					}
				}
			}
		}
	}
	n.setCuts(cuts)
}

// cut cuts the links from each of from to each of to, one way, besides the cuts there
// are: gossip from to gets through, and stream connections fail both ways, as TCP's do
// when one direction drops.
func (n *memNet) cut(from, to []string) {
	n.mu.Lock()
	cuts := make(map[[2]string]bool, len(n.cuts))
	for k := range n.cuts {
		cuts[k] = true
	}
	n.mu.Unlock()
	for _, a := range from {
		for _, b := range to {
			cuts[[2]string{a, b}] = true
		}
	}
	n.setCuts(cuts)
}

// heal ends every cut.
func (n *memNet) heal() { n.setCuts(map[[2]string]bool{}) }

// setCuts makes cuts the cut links, and closes the open connections across them.
func (n *memNet) setCuts(cuts map[[2]string]bool) {
	n.mu.Lock()
	n.cuts = cuts
	var closing []*memLink
	for l := range n.links {
		if n.cutLocked(l.from, l.to) {
			closing = append(closing, l)
			delete(n.links, l)
		}
	}
	n.mu.Unlock()
	for _, l := range closing {
		l.close()
	}
}

// refusedAtCuts is how many stream connections a cut has refused.
func (n *memNet) refusedAtCuts() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.refused
}

// cutLocked reports whether a stream between from and to is cut (either way). n.mu is
// held on entry.
func (n *memNet) cutLocked(from, to string) bool {
	return n.cuts[[2]string{from, to}] || n.cuts[[2]string{to, from}]
}

// nextPortLocked hands out a port. n.mu is held on entry.
func (n *memNet) nextPortLocked() int {
	n.port++
	return memBasePort + n.port
}

// A memLink is one open stream connection between two nodes: its two ends (server nil
// when the other end is not ours to close: a gossip stream, whose net.Pipe closes both).
type memLink struct {
	n              *memNet
	from, to       string
	client, server net.Conn
	once           sync.Once
}

func (l *memLink) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		if l.server != nil {
			_ = l.server.Close()
		}
	})
}

// forget takes l out of the open links once either end is closed.
func (l *memLink) forget() {
	l.n.mu.Lock()
	delete(l.n.links, l)
	l.n.mu.Unlock()
}

// open registers l, its ends made, unless its link is cut: then it closes l.
func (n *memNet) open(l *memLink) error {
	n.mu.Lock()
	cut := n.cutLocked(l.from, l.to)
	if cut {
		n.refused++
	} else {
		n.links[l] = struct{}{}
	}
	n.mu.Unlock()
	if cut {
		l.close()
		return errCut
	}
	return nil
}

// memConn is one end of a memLink's connection.
type memConn struct {
	net.Conn
	link          *memLink
	local, remote net.Addr
}

func (c *memConn) Close() error {
	c.link.forget()
	return c.Conn.Close()
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

// memAddr is an address on a memNet.
type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// pipeSize is the buffer of each direction of an rpc connection.
const pipeSize = 256 << 10

// bufPipe returns the two ends of a buffered in-memory connection: bufconn's, whose
// listener is the only way to make one.
func bufPipe() (client, server net.Conn) {
	l := bufconn.Listen(pipeSize)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err := l.Dial()
	if err != nil {
		panic(err) // the listener is open until this returns
	}
	return client, <-accepted
}

// memNode is one node's Network on a memNet.
type memNode struct {
	n    *memNet
	name string
}

// Listen opens an rpc listener at addr; port 0 takes a free one.
func (nd memNode) Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	n := nd.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == "0" {
		port = strconv.Itoa(n.nextPortLocked())
	}
	addr = net.JoinHostPort(host, port)
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("memnet: listen %s: address in use", addr)
	}
	l := &memListener{n: n, addr: memAddr(addr), node: nd.name, ch: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects to an rpc listener or a gossip transport at addr.
func (nd memNode) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n := nd.n
	n.mu.Lock()
	if g, ok := n.gossipers[addr]; ok {
		n.mu.Unlock()
		return g.accept(ctx, nd.name)
	}
	l, ok := n.listeners[addr]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("memnet: dial %s: %w", addr, errRefused)
	}
	link := &memLink{n: n, from: nd.name, to: l.node}
	c, s := bufPipe()
	link.client = &memConn{Conn: c, link: link, local: memAddr(nd.name), remote: l.addr}
	link.server = &memConn{Conn: s, link: link, local: l.addr, remote: memAddr(nd.name)}
	if err := n.open(link); err != nil {
		return nil, fmt.Errorf("memnet: dial %s: %w", addr, err)
	}
	var err error
	select {
	case l.ch <- link.server:
		return link.client, nil
	case <-l.done:
		err = errRefused
	case <-ctx.Done():
		err = ctx.Err()
	}
	link.forget()
	link.close()
	return nil, fmt.Errorf("memnet: dial %s: %w", addr, err)
}

// Gossip gives memberlist a transport of its own on n.
func (nd memNode) Gossip(c *memberlist.Config) error {
	n := nd.n
	n.mu.Lock()
	g := &memGossip{n: n, node: nd.name, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(n.nextPortLocked())),
		packets: make(chan *memberlist.Packet, gossipQueue), streams: make(chan net.Conn), done: make(chan struct{})}
	n.gossipers[g.addr] = g
	n.mu.Unlock()
	c.Transport = g
	if n.tune != nil {
		n.tune(c)
	}
	return nil
}

// A memListener is an rpc port on a memNet.
type memListener struct {
	n    *memNet
	addr memAddr
	node string
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and frees the address; the connections accepted stay open.
func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[string(l.addr)] == l {
			delete(l.n.listeners, string(l.addr))
		}
		l.n.mu.Unlock()
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

// A memGossip is a member's gossip transport on a memNet (memberlist.NodeAwareTransport):
// packets go into the receiver's queue, or are lost; streams are net.Pipe's, as
// memberlist's MockTransport makes them.
type memGossip struct {
	n       *memNet
	node    string
	addr    string
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{} // closed by Shutdown: nothing reaches the member any more
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memGossip)(nil)

func (g *memGossip) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	host, port, err := splitHostPort(g.addr)
	return net.ParseIP(host), port, err
}

func (g *memGossip) WriteTo(b []byte, addr string) (time.Time, error) {
	return g.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress queues b at the member at a, unless the link is cut, the member is shut
// down or its queue is full: then b is lost, as a datagram is.
func (g *memGossip) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	g.n.mu.Lock()
	dest := g.n.gossipers[a.Addr]
	lost := dest == nil || g.n.cuts[[2]string{g.node, dest.node}]
	g.n.mu.Unlock()
	if lost {
		return now, nil
	}
	select {
	case <-dest.done:
		return now, nil
	default:
	}
	select {
	case dest.packets <- &memberlist.Packet{Buf: bytes.Clone(b), From: memAddr(g.addr), Timestamp: now}:
	default:
	}
	return now, nil
}

func (g *memGossip) PacketCh() <-chan *memberlist.Packet { return g.packets }

func (g *memGossip) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream to the member at a.
func (g *memGossip) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	g.n.mu.Lock()
	dest := g.n.gossipers[a.Addr]
	g.n.mu.Unlock()
	if dest == nil {
		return nil, fmt.Errorf("memnet: dial %s: %w", a.Addr, errRefused)
	}
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return dest.accept(ctx, g.node)
}

// accept hands dest's member a stream from the node named from, and returns its other
// end.
func (g *memGossip) accept(ctx context.Context, from string) (net.Conn, error) {
	link := &memLink{n: g.n, from: from, to: g.node}
	theirs, ours := net.Pipe()
	link.client = &memConn{Conn: ours, link: link, local: memAddr(from), remote: memAddr(g.addr)}
	if err := g.n.open(link); err != nil {
		return nil, fmt.Errorf("memnet: dial %s: %w", g.addr, err)
	}
	var err error
	select {
	case g.streams <- &memConn{Conn: theirs, link: link, local: memAddr(g.addr), remote: memAddr(from)}:
		return link.client, nil
	case <-g.done:
		err = errRefused
	case <-ctx.Done():
		err = ctx.Err()
	}
	link.forget()
	link.close()
	return nil, fmt.Errorf("memnet: dial %s: %w", g.addr, err)
}

func (g *memGossip) StreamCh() <-chan net.Conn { return g.streams }

// Shutdown makes the member unreachable: what is sent to it from now on is lost, and
// streams to it are refused.
func (g *memGossip) Shutdown() error {
	g.once.Do(func() { close(g.done) })
	return nil
}
