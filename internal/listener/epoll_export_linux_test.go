//go:build !bifrost_portable

package listener

import "syscall"

// What the external tests (package listener_test, which drive the broker over this
// package) read of a connection's write queue.

// WriteQueue returns what c's write queue holds: the bytes the socket has not taken yet,
// and the capacity of the buffer that holds them (0: none).
func WriteQueue(c Conn) (queued, capacity int) {
	cc := c.(*conn)
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	if cc.out != nil {
		capacity = cap(*cc.out)
	}
	return int(cc.pending.Load()), capacity
}

// ConnsOf returns l's connections that its poller serves.
func ConnsOf(l *Listener) []Conn {
	var cs []Conn
	for _, p := range l.srv.loop.pollers {
		p.mu.Lock()
		for _, c := range p.conns {
			if c != nil && c.l == l {
				cs = append(cs, c)
			}
		}
		p.mu.Unlock()
	}
	return cs
}

// SetSendBuffer sets the size of c's socket send buffer (SO_SNDBUF; the kernel doubles
// it), which otherwise grows to megabytes on loopback before anything is queued.
func SetSendBuffer(c Conn, n int) error {
	cc := c.(*conn)
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	return syscall.SetsockoptInt(int(cc.fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
}
