//go:build linux && !bifrost_portable

package listener

import (
	"net"
	"syscall"

	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
)

// What a conn does with its socket on the epoll engine (every transport, served by
// epoll_loop_linux.go): its writes, its queue of bytes the socket has not taken, its
// close, its addresses. All of it runs under c.wmu, the lock the poller takes to close the
// descriptor, so none of it can touch a number that has been closed and given to another
// connection.

// connEngine is what a conn holds of its socket on the epoll engine; c.wmu guards it.
type connEngine struct {
	fd     int32   // the descriptor, closed once stFdClosed is set
	outOff uint32  // bytes of out already written
	out    *[]byte // bytes the socket has not taken yet (pooled); nil when none
}

// admitting marks c as being added to its poller: writes meanwhile queue what the socket
// does not take, and poller.add watches for writability then.
func (c *conn) admitting() { c.state.Or(stAdmitting) }

// RemoteAddr implements Conn.
func (c *conn) RemoteAddr() net.Addr { return c.epollAddr(true) }

// LocalAddr implements Conn.
func (c *conn) LocalAddr() net.Addr { return c.epollAddr(false) }

// The queue (c.out, written from c.outOff on) holds what the socket has not taken, in a
// pooled buffer, and none once it is empty. A client that reads, but slower than it is
// written to, may keep it from ever emptying, so the bytes written out are dropped as it
// goes, not only when it empties: writeSocket makes room behind the unsent bytes by moving
// them to the front of the buffer (when they fill at most half of it, so that a move
// copies fewer bytes than went out since the last) or into a larger buffer, and epollFlush
// moves them into a smaller one when they fill at most a sixteenth of theirs (after a
// burst). So the buffer is at most sixteen times what is queued (or 16 KiB), and what is
// queued is what the handler lets wait (the broker: its slow-consumer threshold).

// writeSocket writes head and bufs as one unit: straight to the socket with one writev
// when nothing is queued, and what the socket does not take is copied to the queue, which
// the poller writes out when the socket is writable. A fenced write (Options.WriteFence)
// drops the queue and closes the connection instead. c.wmu is held.
func (c *conn) writeSocket(head []byte, bufs [][]byte) error {
	st, total, err := c.writable(head, bufs)
	if err != nil {
		return err
	}
	n := 0
	if c.out == nil {
		var err error
		n, err = writev(int(c.fd), head, bufs)
		if err != nil {
			_ = c.closeSocketLocked(err)
			return err
		}
		if n == total {
			return nil
		}
	}
	rest := total - n
	if c.out == nil {
		c.out, c.outOff = bufpool.Get(rest), 0
		if st&stAdmitting == 0 { // else poller.add watches it
			if err := c.l.srv.loop.pollerFor(int(c.fd)).watch(int(c.fd), c.watchedEvents()); err != nil {
				_ = c.closeSocketLocked(err)
				return err
			}
		}
	} else {
		c.roomFor(rest)
	}
	q := *c.out
	q, n = appendAfter(q, head, n)
	for _, b := range bufs {
		q, n = appendAfter(q, b, n)
	}
	*c.out = q
	c.pending.Add(int64(rest))
	return nil
}

// roomFor makes room for n more bytes behind the queue's unsent ones, dropping the bytes
// written out (see writeSocket). c.out is not nil; c.wmu is held.
func (c *conn) roomFor(n int) {
	q := *c.out
	if cap(q)-len(q) >= n {
		return
	}
	unsent := q[c.outOff:]
	if len(unsent)+n <= cap(q)/2 {
		*c.out, c.outOff = q[:copy(q, unsent)], 0
		return
	}
	c.moveQueue(2 * (len(unsent) + n))
}

// moveQueue moves the queue's unsent bytes into a pooled buffer of at least size bytes.
// c.out is not nil; c.wmu is held.
func (c *conn) moveQueue(size int) {
	nb := bufpool.Get(size)
	*nb = append(*nb, (*c.out)[c.outOff:]...)
	bufpool.Put(c.out)
	c.out, c.outOff = nb, 0
}

// queueShrinkMin is the smallest queue buffer epollFlush moves into a smaller one.
const queueShrinkMin = 16 << 10

// appendAfter appends b to q but for its first skip bytes, which the socket took, and
// returns the bytes still to skip.
func appendAfter(q, b []byte, skip int) ([]byte, int) {
	if skip >= len(b) {
		return q, skip - len(b)
	}
	return append(q, b[skip:]...), 0
}

// epollFlush writes what is queued, as much as the socket takes (nothing, if the write is
// fenced: see writeSocket); once the queue is empty it stops watching for writability, and
// a queue left in a buffer far too large for it moves to a smaller one (see writeSocket).
// It reports the bytes written (written: the half close of a Shutdown, drain notices).
// Called by the poller on EPOLLOUT.
func (c *conn) epollFlush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	st := c.state.Load()
	if c.out == nil || st&stFdClosed != 0 {
		return
	}
	if c.writeFenced(st) {
		c.dropQueue()
		_ = c.closeSocketLocked(ErrWriteFenced)
		return
	}
	n, err := writev(int(c.fd), (*c.out)[c.outOff:], nil)
	if err != nil {
		_ = c.closeSocketLocked(err)
		return
	}
	c.outOff += uint32(n)
	switch unsent := len(*c.out) - int(c.outOff); {
	case unsent == 0:
		c.dropQueue()
		if err := c.l.srv.loop.pollerFor(int(c.fd)).watch(int(c.fd), c.watchedEvents()); err != nil {
			_ = c.closeSocketLocked(err)
			return
		}
	case cap(*c.out) >= queueShrinkMin && unsent <= cap(*c.out)/16:
		c.moveQueue(2 * unsent) // a burst went out: let its buffer go
	}
	if n > 0 {
		c.written(n)
	}
}

// watchedEvents returns the events c's socket is to be watched for: readability unless
// its reads are paused (a hang-up all the same, so that a paused peer that goes away is
// closed), writability while bytes are queued. c.wmu is held.
func (c *conn) watchedEvents() uint32 {
	ev := uint32(evRead)
	if c.paused() {
		ev = syscall.EPOLLRDHUP
	}
	if c.out != nil {
		ev |= syscall.EPOLLOUT
	}
	return ev
}

// readsChanged watches c's socket for what PauseReads or ResumeReads asked; a connection
// being added is watched by poller.add, which reads the state. c.wmu is held.
func (c *conn) readsChanged() {
	if c.state.Load()&stAdmitting != 0 {
		return
	}
	if err := c.l.srv.loop.pollerFor(int(c.fd)).watch(int(c.fd), c.watchedEvents()); err != nil {
		_ = c.closeSocketLocked(err)
	}
}

// dropQueue gives the queue's buffer back. c.wmu is held.
func (c *conn) dropQueue() {
	if c.out != nil {
		bufpool.Put(c.out)
		c.out, c.outOff = nil, 0
	}
}

// closeSocketLocked asks for the connection to be closed, with err as OnClose's reason: it
// records the reason and shuts the socket down; the poller reads EOF next and closes the
// descriptor (see epoll_loop_linux.go for why only the poller does). c.wmu is held.
func (c *conn) closeSocketLocked(err error) error {
	st := c.state.Load()
	if st&(stFdClosed|stCloseReq) != 0 {
		return nil
	}
	if err != nil {
		c.l.srv.reasons.Store(c, err)
	}
	c.state.Or(stCloseReq)
	_ = syscall.Shutdown(int(c.fd), syscall.SHUT_RDWR)
	return nil
}

// shutdownWrite half-closes the socket: the peer reads EOF after what was sent. c.wmu is
// held.
func (c *conn) shutdownWrite() error { return syscall.Shutdown(int(c.fd), syscall.SHUT_WR) }

// epollAddr asks the kernel for the socket's peer (or local) address: a connection keeps
// no copy, as few ever need it. After the close it is an empty address.
func (c *conn) epollAddr(peer bool) net.Addr {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.state.Load()&stFdClosed != 0 {
		return &net.TCPAddr{}
	}
	var sa syscall.Sockaddr
	var err error
	if peer {
		sa, err = syscall.Getpeername(int(c.fd))
	} else {
		sa, err = syscall.Getsockname(int(c.fd))
	}
	if err != nil {
		return &net.TCPAddr{}
	}
	return sockaddrAddr(sa)
}
