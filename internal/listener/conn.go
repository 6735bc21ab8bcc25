package listener

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lesismal/nbio"
)

// conn is our record of one connection, for every transport: the Conn the handler sees.
// On a tcp listener (on Linux) it is all an idle connection costs the listener: the
// socket is its own (fd, served by loop_linux.go), it holds no buffer unless the socket
// has not taken what was written (out), and it caches nothing (addresses are asked of the
// kernel). On ws, tls and wss it sits on top of nbio's record (nc), and the transport's
// state hangs off that record's session: the *websocket.Conn for ws, the *tlsConn that
// embeds this record for tls and wss.
//
// Fields are ordered for size: 96 bytes, one size class.
type conn struct {
	nc      *nbio.Conn // ws, tls, wss (and tcp where our loop does not run); nil: fd
	l       *Listener
	value   any
	tm      timer[conn]   // guarded by the wheel's lock
	last    atomic.Uint32 // wheel tick of the last Touch (or SetIdleTimeout)
	state   atomic.Uint32 // st* bits
	pending atomic.Int64  // bytes accepted by Write and not yet taken by the socket
	wmu     sync.Mutex    // one writer at a time: see writeLocked; guards fd, out, outOff
	fd      int32         // own socket: the descriptor, closed once stFdClosed is set
	outOff  uint32        // own socket: bytes of out already written
	out     *[]byte       // own socket: bytes the socket has not taken yet (pooled)
}

// errOpenWrite closes a TCP connection whose OnOpen wrote more than its socket took.
var errOpenWrite = errors.New("listener: OnOpen wrote more than the socket takes at once")

// Bits of conn.state.
//
// Events are handed over without a lock: OnOpen and OnData run with stBusy set (only one
// goroutine, the one delivering, sets it). A close reported while stBusy is set only marks
// stClosing, and the goroutine clearing stBusy delivers OnClose; otherwise the close hook
// delivers it at once. Either way one CAS decides, so OnClose comes exactly once and never
// overlaps OnData, and nothing is delivered after it.
const (
	stOpen       = 1 << iota // OnOpen has started: OnClose is owed
	stBusy                   // OnOpen or OnData is running
	stClosing                // closed while busy: OnClose is owed by the busy goroutine
	stClosed                 // OnClose delivered (or being delivered)
	stShutdown               // Shutdown called: writes refused, reads dropped, draining
	stHalfClosed             // the write side is shut down
	stPeerClose              // the peer sent a WebSocket close frame
	stAdmitting              // being added to the engine: not yet polled, see closeWith
	stCloseReq               // nbio: closeWith was called while admitting; own socket: closeWith was called
	stIdleSet                // SetIdleTimeout was called: Touch refreshes the deadline
	stWantDrain              // NotifyDrained was called: OnDrained is due once pending is 0
	stFdClosed               // own socket: the descriptor is closed (see loop_linux.go)
	stUpgraded               // own ws socket: the upgrade is done, frames follow
	stWSHeld                 // own ws socket: its poller holds decoder state (wsown_linux.go)
)

var _ timed[conn] = (*conn)(nil)

func (c *conn) timer() *timer[conn]      { return &c.tm }
func (c *conn) activity() *atomic.Uint32 { return &c.last }

// open delivers OnOpen, unless the connection closed first (see closed). On TCP the
// connect timeout starts here, at the accept; ws, tls and wss connections have been
// under it since their accept (the onOpen hook), and it is not restarted: it is absolute
// until the handler calls SetIdleTimeout.
func (c *conn) open() {
	for {
		st := c.state.Load()
		if st&stClosed != 0 {
			return
		}
		if c.state.CompareAndSwap(st, st|stOpen|stBusy) {
			break
		}
	}
	s := c.l.srv
	if c.l.kind == kindTCP {
		s.wheel.set(c, s.o.ConnectTimeout)
	}
	c.l.n.Add(1)
	defer c.release()
	defer c.recoverHandler("OnOpen")
	s.h.OnOpen(c)
}

// onData delivers data unless the connection is closing or shutting down.
func (c *conn) onData(data []byte) {
	for {
		st := c.state.Load()
		if st&stOpen == 0 || st&(stClosing|stClosed|stShutdown|stCloseReq) != 0 {
			return
		}
		if c.state.CompareAndSwap(st, st|stBusy) {
			break
		}
	}
	defer c.release()
	defer c.recoverHandler("OnData")
	c.l.srv.h.OnData(c, data)
}

// recoverHandler, deferred around a handler call, turns a panic into a log line and the
// end of this connection rather than of the process (as net/http does for a request):
// a malformed packet from one client must not take the broker down.
func (c *conn) recoverHandler(what string) {
	if p := recover(); p != nil {
		c.l.srv.log.Error("listener: handler panicked; closing the connection",
			slog.String("call", what), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		_ = c.closeWith(fmt.Errorf("listener: %s panicked: %v", what, p))
	}
}

// release clears stBusy and delivers OnClose if the connection closed meanwhile.
func (c *conn) release() {
	for {
		st := c.state.Load()
		n := st &^ stBusy
		owed := st&(stClosing|stClosed) == stClosing
		if owed {
			n |= stClosed
		}
		if c.state.CompareAndSwap(st, n) {
			if owed {
				c.finish()
			}
			return
		}
	}
}

// closed is called once, from the engine's close hook, when nbio has closed the socket.
// (It loads the state before anything else: that atomic load is what orders this
// goroutine after open for the race detector, which cannot see epoll.)
func (c *conn) closed() {
	st := c.state.Load()
	c.l.srv.wheel.remove(c)
	for ; ; st = c.state.Load() {
		switch {
		case st&(stClosing|stClosed) != 0:
			return // already handled
		case st&stOpen == 0:
			// Never opened (in its WebSocket upgrade or TLS handshake): no events, and
			// none later, for open may be racing with this (a TLS handshake completes in
			// its own goroutine).
			if c.state.CompareAndSwap(st, st|stClosed) {
				return
			}
		case st&stBusy != 0:
			if c.state.CompareAndSwap(st, st|stClosing) {
				return
			}
		default:
			if c.state.CompareAndSwap(st, st|stClosing|stClosed) {
				c.finish()
				return
			}
		}
	}
}

// finish delivers OnClose, with the error that says why (see the package doc).
func (c *conn) finish() {
	st := c.state.Load()
	var err error
	if c.ownSocket() {
		if e, ok := c.l.srv.reasons.LoadAndDelete(c); ok {
			err = e.(error)
		}
	} else {
		_, err = c.nc.IsClosed()
	}
	switch {
	case st&stShutdown != 0:
		err = nil
	case st&stPeerClose != 0 && err == nil:
		err = io.EOF
	}
	c.l.n.Add(-1)
	defer c.recoverHandler("OnClose")
	c.l.srv.h.OnClose(c, err)
}

// Touch implements Conn: the idle timeout starts over. Not under the connect timeout,
// which is absolute (a slowloris client dribbling its CONNECT must not keep the
// connection), and not while draining.
func (c *conn) Touch() {
	if c.state.Load()&(stIdleSet|stShutdown) == stIdleSet {
		c.l.srv.wheel.touch(c)
	}
}

// written accounts for n bytes taken by the socket from nbio's queue; nc is locked. When a
// shutting-down connection's queue is empty its write side is shut; when one whose
// handler asked for it (NotifyDrained) is, OnDrained is due (drain.go).
func (c *conn) written(n int) {
	st := c.state.Load()
	if c.pending.Add(-int64(n)) > 0 {
		return
	}
	if st&stShutdown != 0 {
		c.halfClose()
	}
	// Loaded after pending: see NotifyDrained.
	if c.state.Load()&stWantDrain != 0 {
		c.drained()
	}
}

// halfClose shuts the write side down, once: the peer reads what was sent, then EOF.
// nc is locked and not closed.
func (c *conn) halfClose() {
	for {
		st := c.state.Load()
		if st&stHalfClosed != 0 {
			return
		}
		if c.state.CompareAndSwap(st, st|stHalfClosed) {
			break
		}
	}
	if err := shutdownWrite(c.fdNum()); err != nil {
		c.l.srv.log.Debug("listener: shutdown(SHUT_WR) failed", "err", err)
	}
}

// Write implements Conn.
func (c *conn) Write(b []byte) (int, error) {
	bufs := [1][]byte{b}
	return c.Writev(bufs[:])
}

// Writev implements Conn.
func (c *conn) Writev(bufs [][]byte) (int, error) {
	size := 0
	for _, b := range bufs {
		size += len(b)
	}
	if size == 0 {
		return 0, nil
	}
	var hdr [wsMaxHeader]byte
	var head []byte
	if c.l.kind&kindWeb != 0 {
		head = appendWSHeader(hdr[:0], wsBinary, size)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.state.Load()&stShutdown != 0 {
		return 0, net.ErrClosed
	}
	if err := c.writeLocked(head, bufs); err != nil {
		return 0, err
	}
	return size, nil
}

// writeLocked writes head (WebSocket framing, may be empty) and bufs as one unit, through
// TLS on tls and wss listeners. c.wmu is held.
func (c *conn) writeLocked(head []byte, bufs [][]byte) error {
	switch {
	case c.ownSocket():
		return c.writeOwn(head, bufs)
	case c.l.kind&kindSecure != 0:
		return c.nc.Session().(*tlsConn).seal(head, bufs)
	}
	return c.writeRaw(head, bufs)
}

// fdNum returns the connection's descriptor.
func (c *conn) fdNum() int {
	if c.ownSocket() {
		return int(c.fd)
	}
	return c.nc.Hash()
}

// writeRaw writes head and bufs to an nbio socket as one unit: straight to the socket with one
// writev when nothing is queued, and whatever the socket does not take is queued in nbio
// (copied), to go out when the socket is writable. The caller holds c.wmu (TCP, ws) or
// the tls.Conn's write lock (every byte of a TLS connection is written by crypto/tls), so
// no other write can come between the two parts. Nothing is retained.
func (c *conn) writeRaw(head []byte, bufs [][]byte) error {
	total := len(head)
	for _, b := range bufs {
		total += len(b)
	}
	nc := c.nc
	n := 0
	var err error
	nc.Lock()
	if closed, _ := nc.IsClosed(); closed {
		nc.Unlock()
		return net.ErrClosed
	}
	if c.pending.Add(int64(total)) == int64(total) { // nothing queued: try the socket
		n, err = writev(nc.Hash(), head, bufs)
		if n > 0 {
			c.pending.Add(-int64(n))
		}
	}
	nc.Unlock()
	if err == nil && n < total && c.state.Load()&stAdmitting != 0 {
		// Queued bytes would never be sent: nbio cannot ask for writability before it
		// polls the socket. A new socket takes tens of KB at once, MQTT sends nothing first.
		err = errOpenWrite
	}
	if err != nil {
		_ = c.closeWith(err)
		return err
	}
	if n == total {
		return nil
	}
	// Queue the rest, in order.
	if n < len(head) {
		if _, err := nc.Write(bytes.Clone(head[n:])); err != nil {
			return err
		}
		n = 0
	} else {
		n -= len(head)
	}
	for _, b := range bufs {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		if _, err := nc.Write(b[n:]); err != nil {
			return err
		}
		n = 0
	}
	return nil
}

// Close implements Conn.
func (c *conn) Close() error { return c.closeWith(nil) }

// closeWith closes the connection; OnClose will get err. While the connection is being
// added to the engine (OnOpen runs then, and the wheel may already expire it) the close is
// left to admitted: closing the descriptor before nbio has registered it would let another
// connection reuse its number and be overwritten in nbio's table.
func (c *conn) closeWith(err error) error {
	if c.ownSocket() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return c.closeOwnLocked(err)
	}
	for {
		st := c.state.Load()
		if st&stAdmitting == 0 {
			return c.nc.CloseWithError(err)
		}
		if err != nil {
			c.l.srv.reasons.LoadOrStore(c, err) // rare: kept aside, not in every conn
		}
		if c.state.CompareAndSwap(st, st|stCloseReq) {
			return nil
		}
		if err != nil {
			c.l.srv.reasons.CompareAndDelete(c, err) // admitted may have come and gone
		}
	}
}

// admitting marks c as being added to the engine; admitted ends that and carries out a
// close asked for meanwhile.
func (c *conn) admitting() { c.state.Or(stAdmitting) }

func (c *conn) admitted() {
	for {
		st := c.state.Load()
		if !c.state.CompareAndSwap(st, st&^(stAdmitting|stCloseReq)) {
			continue
		}
		if err, ok := c.l.srv.reasons.LoadAndDelete(c); ok {
			_ = c.nc.CloseWithError(err.(error))
		} else if st&stCloseReq != 0 {
			_ = c.nc.Close()
		}
		return
	}
}

// Shutdown implements Conn.
func (c *conn) Shutdown() {
	c.wmu.Lock()
	if c.state.Load()&stShutdown != 0 {
		c.wmu.Unlock()
		return
	}
	if c.l.kind&kindWeb != 0 {
		_ = c.writeLocked(wsCloseNormal[:], nil)
	}
	if c.l.kind&kindSecure != 0 {
		// close_notify: the peer's TLS reads end cleanly, not with a truncation error.
		_ = c.nc.Session().(*tlsConn).tc.CloseWrite()
	}
	c.state.Or(stShutdown)
	if c.ownSocket() {
		if c.state.Load()&(stFdClosed|stCloseReq) == 0 && c.pending.Load() <= 0 {
			c.halfClose()
		}
	} else {
		c.nc.Lock()
		if closed, _ := c.nc.IsClosed(); !closed && c.pending.Load() <= 0 {
			c.halfClose()
		}
		c.nc.Unlock()
	}
	s := c.l.srv
	s.wheel.reset(c, s.o.DrainTimeout)
	c.wmu.Unlock()
}

// SetIdleTimeout implements Conn. It ends the absolute connect timeout: from now on
// Touch refreshes the deadline. It does nothing after Shutdown: the drain runs its
// course.
func (c *conn) SetIdleTimeout(d time.Duration) {
	c.wmu.Lock()
	if c.state.Load()&stShutdown == 0 {
		c.state.Or(stIdleSet)
		c.l.srv.wheel.reset(c, d)
	}
	c.wmu.Unlock()
}

// Buffered implements Conn.
func (c *conn) Buffered() int { return int(max(c.pending.Load(), 0)) }

// RemoteAddr implements Conn.
func (c *conn) RemoteAddr() net.Addr {
	if c.ownSocket() {
		return c.ownAddr(true)
	}
	return c.nc.RemoteAddr()
}

// LocalAddr implements Conn.
func (c *conn) LocalAddr() net.Addr {
	if c.ownSocket() {
		return c.ownAddr(false)
	}
	return c.nc.LocalAddr()
}

// Listener implements Conn.
func (c *conn) Listener() *Listener { return c.l }

// Value implements Conn.
func (c *conn) Value() any { return c.value }

// SetValue implements Conn.
func (c *conn) SetValue(v any) { c.value = v }

// TLS implements Conn.
func (c *conn) TLS() *tls.ConnectionState {
	if c.l.kind&kindSecure == 0 {
		return nil
	}
	cs := c.nc.Session().(*tlsConn).tc.ConnectionState()
	return &cs
}
