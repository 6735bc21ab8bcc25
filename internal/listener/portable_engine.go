//go:build !linux || bifrost_portable

package listener

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// The portable engine: every transport on the standard library's net package, where
// there is no epoll (and on Linux built with -tags bifrost_portable, which is how CI runs
// the contract tests on it). A listener's accept goroutine takes connections with Go's
// Accept; each connection gets a goroutine that reads it (portable_read.go) and hands the
// bytes to the code the epoll engine's pollers use: OnData on tcp, the WebSocket upgrade
// and frame decoder on ws (ws.go), the TLS pump on tls and wss (tls.go). Writes
// give the socket what it takes without waiting (on unix), and a connection has a
// goroutine that writes the rest while there is any (portable_conn.go), so that Write
// never blocks. Go's net package makes accepted sockets close-on-exec and gives them
// TCP_NODELAY and TCP keepalive, as the epoll engine does.
//
// What it costs beyond the epoll engine: per idle connection, the reading goroutine (its
// stack), its read buffer (1 KiB while the traffic is small), and Go's net.TCPConn with
// the two addresses it caches; per write, a copy of what is written; per burst of writes
// the socket does not take at once, a goroutine start.
//
// Ownership of the socket: Go's net package keeps a descriptor open while a call on it
// runs, so any goroutine may close a *net.TCPConn without hitting a number reused by
// another connection. A close asked for (closeWith) wakes the reader with a read deadline
// in the past; the reader then closes the socket and delivers the close, unless the write
// goroutine is still sending what was written before the close, in which case the write
// goroutine closes the socket once it is done (portable_conn.go).

// eventLoops is the portable engine's part of Server: its readers, which Close waits for.
type eventLoops struct {
	readers sync.WaitGroup // one per connection, until it has delivered its close
	// resumed is broadcast when a paused connection is resumed or closed; its readers
	// wait on it (portable_read.go). Its lock is a leaf: taken under c.wmu.
	pauseMu sync.Mutex
	resumed *sync.Cond
}

// Profile labels of the portable engine's goroutines, made once rather than per connection.
var (
	readLabels  = goroutineLabels("connection")
	writeLabels = goroutineLabels("connection write")
)

// acceptStep returns the accept step of a listener: Go's Accept, then admit.
func (s *Server) acceptStep(l *Listener) (func() error, error) {
	tl, ok := l.ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("listener: %s: not a TCP listener", l.name)
	}
	return func() error {
		nc, err := tl.AcceptTCP()
		if err != nil {
			return err
		}
		s.admit(l, nc)
		return nil
	}, nil
}

// remoteIP returns c's peer IP address, IPv4 unmapped.
func remoteIP(c *net.TCPConn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// admit takes an accepted connection: the Admit check, OnOpen on tcp (before its reader
// starts, so nothing is read before it returns; on ws it comes with the upgrade, on tls
// with the handshake, on wss with both, under the connect timeout meanwhile), then its
// reader. A tls or wss connection's record is a tlsConn, in the phase tlsHello: nothing
// happens until the client speaks.
func (s *Server) admit(l *Listener, nc *net.TCPConn) {
	if a := s.o.Admit; a != nil && !a(l, remoteIP(nc)) {
		_ = nc.Close()
		return
	}
	var c *conn
	if l.kind&kindSecure != 0 {
		t := &tlsConn{conn: conn{connEngine: connEngine{nc: nc, fd: socketFD(nc)}, l: l}}
		c = &t.conn
	} else {
		c = &conn{connEngine: connEngine{nc: nc, fd: socketFD(nc)}, l: l}
	}
	if l.kind == kindTCP {
		c.open()
	} else {
		s.wheel.set(c, s.connectTimeoutNow()) // OnOpen comes with the upgrade or handshake
	}
	s.readers.Add(1)
	s.spawn(readLabels, func() {
		defer s.readers.Done()
		s.readLoop(c)
	})
}

// stopLoops closes every connection and returns when each has delivered its OnClose (on
// tls and wss, or handed it to its handshake goroutine, which Close waits for too). No
// connection may be added meanwhile: the accept loops have returned. Every connection not
// yet closed is in the wheel (from its accept until closed takes it out), but for one
// whose timeout is firing, whose close is under way.
func (s *Server) stopLoops() {
	var cs []*conn
	s.wheel.each(func(c *conn) { cs = append(cs, c) })
	for _, c := range cs {
		_ = c.closeWith(nil)
	}
	s.readers.Wait()
}
