//go:build linux && !bifrost_portable

package listener

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
)

// The epoll engine, the event loop of every connection on Linux: epoll, one goroutine per
// poller, a table of connections indexed by descriptor, one read buffer per poller. tcp
// bytes go to OnData, ws bytes to the upgrade and frame decoder (epoll_ws_linux.go), tls
// and wss bytes to the TLS pump (epoll_tls_linux.go, tls.go). (The portable engine,
// portable_engine.go, serves the same contract elsewhere; build with -tags
// bifrost_portable to use it on Linux.)
//
// Why our own loop rather than an event-loop library (such as nbio): a library's record
// of an idle connection (nbio: 208 B, and the two addresses it caches, 160 B) comes on top
// of ours, and an accept path through Go's net package leaves a netFD, a poller
// registration and two addresses per connection as garbage a moment later, interleaved
// with what stays. Here a connection is our conn and nothing else (96 B; on tls and wss
// the tlsConn around it): the descriptor comes from accept4(2) on the listener's socket,
// the addresses are asked of the kernel when someone wants them, and the table holds one
// pointer per descriptor. Descriptors are close-on-exec from accept4, and a descriptor is
// removed from epoll before it is closed, so no stale event can reach a reused number
// (TestForkStorm).
//
// Ownership of a descriptor: only its poller closes it, after taking it out of epoll and
// out of the table, holding the conn's write lock (wmu) so that no write, shutdown or
// address lookup can run on a number that another connection may get next. Every other
// goroutine that wants a connection closed (Close, a timeout, a failed write) records why
// and shuts the socket down (shutdown(2) keeps the number); the poller then reads EOF and
// closes it (epoll_conn_linux.go closeSocketLocked). So the number a poller reads or
// writes is always the connection it looked up.
//
// Events are level-triggered: a poller reads a socket until it would block, or at most
// maxReads buffers per event so that one flooding client yields to the others (epoll
// reports the rest next round); a hang-up is acted on only when a read returns EOF, so
// bytes that came with it are delivered first. A write the socket does not take whole is
// queued (epoll_conn_linux.go) and the socket watched for writability until the queue
// drains.
type loop struct {
	s       *Server
	pollers []*poller
	wg      sync.WaitGroup
}

// maxReads bounds the reads of one socket per readiness event: with the default 32 KiB
// buffer, 128 KiB, about what a socket's receive buffer holds by default, so that a client
// that keeps its socket full (a publisher flooding) yields to the others after that, where
// the rest of the round (a CONNECT, a PINGREQ) would wait behind megabytes. An epoll_wait
// per 128 KiB read costs the flood nothing measurable.
const maxReads = 4

// Events a connection is watched for (conn.watchedEvents: evRead, with EPOLLOUT while
// bytes are queued; without EPOLLIN while paused); epoll adds EPOLLERR and EPOLLHUP.
const evRead = syscall.EPOLLIN | syscall.EPOLLRDHUP

// A poller is one epoll instance and the goroutine that waits on it.
type poller struct {
	s     *Server
	idx   int // the poller's index in the loop: its Batcher rounds' loop
	epfd  int
	epf   *os.File            // epfd, non-blocking, for Go's netpoller to wait on (run); closes epfd
	wake  [2]int              // a pipe: a byte written to wake[1] stops the poller
	buf   []byte              // read buffer, shared by the poller's connections
	n     int                 // pollers in the loop: descriptor fd is this poller's slot fd/n
	ws    map[*conn]*wsStream // ws connections cut inside a frame (epoll_ws_linux.go)
	tls   *pumpBufs           // TLS pump buffers, made by the first TLS bytes (epoll_tls_linux.go)
	mu    sync.Mutex
	conns []*conn // by slot; guarded by mu
}

// newLoop creates the pollers and starts their goroutines.
func newLoop(s *Server) (*loop, error) {
	lp := &loop{s: s}
	for i := range s.o.Pollers {
		p, err := newPoller(s, i, s.o.Pollers)
		if err != nil {
			lp.stop()
			return nil, err
		}
		lp.pollers = append(lp.pollers, p)
		lp.wg.Add(1)
		s.goroutine("poller", func() {
			defer lp.wg.Done()
			p.run()
		})
	}
	return lp, nil
}

func newPoller(s *Server, idx, n int) (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("listener: epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, fmt.Errorf("listener: epoll descriptor: %w", err)
	}
	p := &poller{s: s, idx: idx, epfd: epfd, epf: os.NewFile(uintptr(epfd), "epoll"), n: n,
		buf: make([]byte, s.o.ReadBufferSize), ws: make(map[*conn]*wsStream)}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		_ = p.epf.Close()
		return nil, fmt.Errorf("listener: pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p.wake[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.release()
		return nil, fmt.Errorf("listener: epoll_ctl: %w", err)
	}
	return p, nil
}

// stop closes every connection (OnClose for each is delivered by its poller) and returns
// when every poller has exited. No connection may be added meanwhile: the accept loops
// have returned.
func (lp *loop) stop() {
	for _, p := range lp.pollers {
		_, _ = syscall.Write(p.wake[1], []byte{1})
	}
	lp.wg.Wait()
}

// pollerFor returns the poller that serves descriptor fd.
func (lp *loop) pollerFor(fd int) *poller { return lp.pollers[fd%len(lp.pollers)] }

// release closes the poller's own descriptors.
func (p *poller) release() {
	_ = syscall.Close(p.wake[0])
	_ = syscall.Close(p.wake[1])
	_ = p.epf.Close()
}

// run waits for events and serves them until the wake pipe is written, then closes the
// poller's connections.
//
// The poller waits in Go's netpoller, not in epoll_wait: its epoll descriptor is itself
// pollable (readable while events are pending), so a poller with nothing to do is a parked
// goroutine, and one with work asks its epoll for events without blocking (epoll_wait
// with a zero timeout) until there are none. A blocking epoll_wait would keep an OS thread
// in a system call between events, and at a few thousand wake-ups a second the runtime's
// hand-offs of that thread's P (to another thread while it waits, back when it wakes)
// cost more CPU than the messages themselves.
func (p *poller) run() {
	defer p.release()
	rc, err := p.epf.SyscallConn()
	if err != nil {
		p.s.log.Error("listener: epoll descriptor; closing the poller's connections", slog.Any("err", err))
		p.closeAll()
		return
	}
	events := make([]syscall.EpollEvent, 128)
	stopped := false
	for !stopped {
		err := rc.Read(func(uintptr) bool {
			for {
				n, err := syscall.EpollWait(p.epfd, events, 0)
				switch {
				case err == syscall.EINTR:
					continue
				case err != nil:
					// Only EBADF, EFAULT or EINVAL: our own bug. Close what we have
					// rather than spin.
					p.s.log.Error("listener: epoll_wait failed; closing the poller's connections", slog.Any("err", err))
					p.closeAll()
					stopped = true
					return true
				case n == 0:
					return false // nothing ready: park until the epoll descriptor is
				}
				if p.serve(events[:n]) {
					stopped = true
					return true
				}
			}
		})
		if err != nil && !stopped {
			p.s.log.Error("listener: waiting for events failed; closing the poller's connections", slog.Any("err", err))
			p.closeAll()
			return
		}
	}
}

// serve handles one round of events and ends it; it reports true, having closed the
// poller's connections, when the wake pipe says to stop.
func (p *poller) serve(events []syscall.EpollEvent) (stop bool) {
	for _, ev := range events {
		fd := int(ev.Fd)
		if fd == p.wake[0] {
			p.endRound()
			p.closeAll()
			return true
		}
		c := p.lookup(fd)
		if c == nil {
			continue // closed since: the event came with the same batch
		}
		if ev.Events&syscall.EPOLLOUT != 0 {
			c.epollFlush()
		}
		if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			p.read(c)
		}
	}
	p.endRound()
	return false
}

// endRound tells the Batcher, if any, that the round's events have been delivered. A
// panic there is logged and the round's leftovers lost, as a handler's panic costs only
// its connection.
func (p *poller) endRound() {
	b := p.s.batcher
	if b == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			p.s.log.Error("listener: EndRound panicked", slog.Int("loop", p.idx), slog.Any("panic", r),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	b.EndRound(p.idx)
}

// lookup returns the connection on fd, or nil. Taking mu also orders this goroutine after
// the accepting one, which the race detector cannot see through epoll.
func (p *poller) lookup(fd int) *conn {
	i := fd / p.n
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < len(p.conns) {
		return p.conns[i]
	}
	return nil
}

// read reads c's socket and delivers what came (OnData), until it would block; EOF or an
// error closes the connection.
func (p *poller) read(c *conn) {
	fd := int(c.fd) // only this goroutine closes it
	for range maxReads {
		n, err := syscall.Read(fd, p.buf)
		switch {
		case n > 0:
			switch {
			case c.l.kind&kindSecure != 0:
				p.tlsData(c, p.buf[:n])
			case c.l.kind&kindWeb != 0:
				p.wsData(c, p.buf[:n])
			default:
				c.onData(p.buf[:n], p.idx)
			}
			if n < len(p.buf) || c.paused() {
				return // most likely all there was; if not, epoll says so again
			}
		case err == nil: // EOF: the peer closed, or Close shut the socket down
			p.close(c, io.EOF)
			return
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return
		default:
			p.close(c, err)
			return
		}
	}
}

// add registers c, opened (OnOpen delivered) and not yet polled, with the poller.
func (p *poller) add(c *conn) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	fd := int(c.fd)
	i := fd / p.n
	p.mu.Lock()
	if i >= len(p.conns) {
		p.conns = append(p.conns, make([]*conn, i+1-len(p.conns))...)
		p.conns = p.conns[:cap(p.conns)]
	}
	p.conns[i] = c
	p.mu.Unlock()
	// With EPOLLOUT if OnOpen wrote more than the socket took at once.
	ev := syscall.EpollEvent{Events: c.watchedEvents(), Fd: int32(fd)}
	err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
	c.state.And(^uint32(stAdmitting))
	if err != nil {
		p.mu.Lock()
		p.conns[i] = nil
		p.mu.Unlock()
		return fmt.Errorf("listener: epoll_ctl: %w", err)
	}
	return nil
}

// watch sets the events fd is watched for (conn.watchedEvents).
func (p *poller) watch(fd int, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(fd)}
	return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
}

// close closes c's socket and delivers its OnClose. ioErr is what the socket said (io.EOF
// for an orderly end); if a close was asked for (closeWith), the reason given there wins.
func (p *poller) close(c *conn, ioErr error) {
	c.wmu.Lock()
	st := c.state.Load()
	if st&stFdClosed != 0 {
		c.wmu.Unlock()
		return
	}
	c.state.Or(stFdClosed)
	fd := int(c.fd)
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	p.mu.Lock()
	if i := fd / p.n; i < len(p.conns) && p.conns[i] == c {
		p.conns[i] = nil
	}
	p.mu.Unlock()
	_ = syscall.Close(fd)
	c.dropQueue()
	c.wmu.Unlock()
	if st&stWSHeld != 0 {
		delete(p.ws, c) // set only by this poller's goroutine, the one closing it
	}
	if st&stCloseReq == 0 {
		switch ioErr {
		case nil:
		case io.EOF:
			c.state.Or(stPeerClose)
		default:
			c.l.srv.reasons.Store(c, ioErr)
		}
	}
	if c.l.kind&kindSecure != 0 {
		c.tls().ended() // a goroutine may still be reading what came before
		return
	}
	c.closed()
}

// closeAll closes every connection of the poller (Server.Close), OnClose(nil) for each
// unless a reason was given before.
func (p *poller) closeAll() {
	p.mu.Lock()
	var cs []*conn
	for _, c := range p.conns {
		if c != nil {
			cs = append(cs, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cs {
		p.close(c, nil)
	}
}

// acceptStep returns the accept step of a listener, served by the loop (made here by the
// first listener; s.mu is held): it accepts
// every connection waiting, with accept4(2) on the listener's socket (non-blocking and
// close-on-exec from the start), and hands each to epollAdmit; it waits in Go's poller
// while none is waiting. An error ends the step (the accept loop backs off and calls it
// again); ECONNABORTED (a client gone before we took it) is skipped.
func (s *Server) acceptStep(l *Listener) (func() error, error) {
	if s.loop == nil {
		lp, err := newLoop(s)
		if err != nil {
			return nil, err
		}
		s.loop = lp
	}
	tl, ok := l.ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("listener: %s: not a TCP listener", l.name)
	}
	// A listener's own RawConn cannot wait for readability (its Read is EINVAL), a file's
	// can: a duplicate of the socket (close-on-exec, non-blocking, so Go polls it), closed
	// by stop after the listener.
	f, err := tl.File()
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	l.dup = f
	// Accepted sockets inherit the listening socket's options on Linux: set once here,
	// they cost nothing per connection (epollAdmit checks the first one).
	if err := rc.Control(func(fd uintptr) { setSockOpts(int(fd)) }); err != nil {
		return nil, err
	}
	var acceptErr error
	var opts sockOpts
	step := func(lfd uintptr) bool {
		for {
			fd, sa, err := syscall.Accept4(int(lfd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
			switch err {
			case nil:
				s.epollAdmit(l, fd, sa, &opts)
			case syscall.EAGAIN:
				return false // wait until another is waiting
			case syscall.EINTR, syscall.ECONNABORTED:
			default:
				acceptErr = err
				return true
			}
		}
	}
	return func() error {
		acceptErr = nil
		if err := rc.Read(step); err != nil {
			return err
		}
		return acceptErr
	}, nil
}

// epollAdmit takes an accepted socket: the Admit check, OnOpen on tcp (before the socket
// is polled, so nothing is read before it returns; on ws it comes with the upgrade, on tls
// with the handshake, on wss with both, under the connect timeout meanwhile), then its
// poller. A tls or wss connection's record is a tlsConn, in the phase tlsHello: nothing
// happens until the client speaks.
func (s *Server) epollAdmit(l *Listener, fd int, sa syscall.Sockaddr, opts *sockOpts) {
	if a := s.o.Admit; a != nil && !a(l, sockaddrIP(sa)) {
		_ = syscall.Close(fd)
		return
	}
	opts.apply(fd)
	var c *conn
	if l.kind&kindSecure != 0 {
		t := &tlsConn{conn: conn{connEngine: connEngine{fd: int32(fd)}, l: l}}
		c = &t.conn
	} else {
		c = &conn{connEngine: connEngine{fd: int32(fd)}, l: l}
	}
	c.admitting()
	if l.kind == kindTCP {
		c.open()
	} else {
		s.wheel.set(c, s.connectTimeoutNow()) // OnOpen comes with the upgrade or handshake
	}
	p := s.loop.pollerFor(fd)
	if err := p.add(c); err != nil {
		s.log.Warn("listener: cannot poll connection", slog.String("listener", l.name), slog.Any("err", err))
		p.close(c, err)
	}
}

// eventLoops is the part of Server that serves connections: on the epoll engine our loop,
// made by the first Listen. Guarded by s.mu.
type eventLoops struct {
	loop *loop
}

// stopLoops stops the loop, if one was made: every connection is closed and its OnClose
// delivered when it returns. Listen makes none any more (s.closed).
func (s *Server) stopLoops() {
	s.mu.Lock()
	lp := s.loop
	s.mu.Unlock()
	if lp != nil {
		lp.stop()
	}
}

// TCP keepalive on accepted sockets: Go's defaults for the connections its listeners
// accept (net.ListenConfig.KeepAlive), which the portable engine's sockets get from Go.
const (
	keepAliveIdle     = 15 // seconds before the first probe
	keepAliveInterval = 15 // seconds between probes
	keepAliveCount    = 9  // probes unanswered before the kernel gives up
)

// setSockOpts gives an accepted socket the options Go's net package gives every TCP
// connection: TCP_NODELAY (an MQTT packet goes out when it is written: without it an
// acknowledgement waits for the peer's delayed ACK, 40 ms, and closed-loop traffic
// crawls) and TCP keepalive, which ends half-open connections of clients that set no MQTT
// keep alive. Failures are ignored, as Go does: the socket works without them.
func setSockOpts(fd int) {
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1)
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle)
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval)
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount)
}

// sockOpts is what a listener's accept step knows of the options of the sockets it
// accepts.
type sockOpts struct {
	checked   bool // the first accepted socket was looked at
	inherited bool // it had the listening socket's options
}

// apply gives the accepted socket fd the options of setSockOpts: nothing to do when
// sockets inherit them from the listening socket, which the first one tells (Linux copies
// a listening socket's options, TCP_NODELAY and keepalive among them, to the sockets it
// accepts; a kernel that did not would cost the calls on every socket, not the options).
func (o *sockOpts) apply(fd int) {
	if !o.checked {
		o.checked = true
		nodelay, err1 := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY)
		idle, err2 := syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
		o.inherited = err1 == nil && err2 == nil && nodelay == 1 && idle == keepAliveIdle
	}
	if !o.inherited {
		setSockOpts(fd)
	}
}

// sockaddrIP returns sa's IP address, IPv4 unmapped, without allocating.
func sockaddrIP(sa syscall.Sockaddr) netip.Addr {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrFrom4(a.Addr)
	case *syscall.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap()
	}
	return netip.Addr{}
}

// sockaddrAddr returns sa as a *net.TCPAddr.
func sockaddrAddr(sa syscall.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: net.IPv4(a.Addr[0], a.Addr[1], a.Addr[2], a.Addr[3]), Port: a.Port}
	case *syscall.SockaddrInet6:
		ip := make(net.IP, net.IPv6len)
		copy(ip, a.Addr[:])
		addr := &net.TCPAddr{IP: ip, Port: a.Port}
		if a.ZoneId != 0 {
			if ifc, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				addr.Zone = ifc.Name
			}
		}
		return addr
	}
	return &net.TCPAddr{}
}
