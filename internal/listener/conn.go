package listener

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// conn is our record of one connection, for every transport: the Conn the handler sees.
// What it holds of its socket depends on the engine (connEngine): on the epoll engine
// (epoll_loop_linux.go) the descriptor and the queue of bytes the socket has not taken
// (epoll_conn_linux.go); on the portable engine (portable_engine.go) the *net.TCPConn and
// the queue its write goroutine has not taken yet (portable_conn.go). On tcp and ws it is
// all an idle connection costs the listener (on the portable engine, with the goroutine
// that reads it). On tls and wss it is the first field of a tlsConn, which holds the TLS
// state (tls.go).
//
// Both engines give conn the same methods on its socket, which the shared code calls:
// writeSocket, closeSocketLocked, shutdownWrite, readsChanged, RemoteAddr and LocalAddr.
// The epoll engine's flush, address lookup and admission are named for it: epollFlush,
// epollAddr, Server.epollAdmit.
//
// Fields are ordered for size: on 64-bit platforms 88 bytes on the epoll engine and 96 on
// the portable one, both the 96-byte size class.
type conn struct {
	connEngine // the engine's hold on the socket
	l          *Listener
	value      any
	tm         timer[conn]   // guarded by the wheel's lock
	last       atomic.Uint32 // wheel tick of the last Touch (or SetIdleTimeout)
	state      atomic.Uint32 // st* bits
	pending    atomic.Int64  // bytes accepted by Write and not yet taken by the socket
	wmu        sync.Mutex    // one writer at a time: see writeLocked; guards connEngine
}

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
	stShutdown               // Shutdown called: writes refused, reads dropped, lingering
	stHalfClosed             // the write side is shut down
	stPeerClose              // the peer sent a WebSocket close frame
	stAdmitting              // epoll: being added to the poller, not yet polled (epoll_conn_linux.go)
	stCloseReq               // closeWith was called: the engine closes the socket next
	stIdleSet                // SetIdleTimeout was called: Touch refreshes the deadline
	stWantDrain              // NotifyDrained was called: OnDrained is due once pending is 0
	stFdClosed               // the engine has closed the socket, or (portable) is closing it
	stUpgraded               // ws, wss: the upgrade is done, frames follow
	stWSHeld                 // epoll ws: its poller holds decoder state (epoll_ws_linux.go)
	stWriting                // portable: the write goroutine runs (portable_conn.go)
	stPaused                 // PauseReads: the reader does not read the socket (pause.go)
)

var _ timed[conn] = (*conn)(nil)

func (c *conn) timer() *timer[conn]      { return &c.tm }
func (c *conn) activity() *atomic.Uint32 { return &c.last }

// open delivers OnOpen, unless the connection closed first (see closed). On TCP the
// connect timeout starts here, at the accept; ws, tls and wss connections have been
// under it since their accept, and it is not restarted: it is absolute
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
		s.wheel.set(c, s.connectTimeoutNow())
	}
	c.l.n.Add(1)
	defer c.release()
	defer c.recoverHandler("OnOpen")
	s.h.OnOpen(c)
}

// onData delivers data unless the connection is closing or shutting down: to a Batcher
// as the data of poller loop's round, or, where loop is -1 (not delivered by a poller), to
// OnData.
func (c *conn) onData(data []byte, loop int) {
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
	if s := c.l.srv; loop >= 0 && s.batcher != nil {
		s.batcher.OnRoundData(c, data, loop)
		return
	}
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

// closed is called once, by the engine's goroutine that closed the socket (a poller, or
// the connection's reader on the portable engine). (It loads the state before anything
// else: that atomic load is what orders this goroutine after open for the race detector,
// which cannot see epoll.)
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
			// its own goroutine). The reason recorded for its close (a timeout, a refused
			// upgrade, a failed handshake) is not wanted: nothing may keep the record.
			if c.state.CompareAndSwap(st, st|stClosed) {
				c.l.srv.reasons.Delete(c)
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
	err := c.closeReason()
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
// connection), and not while lingering after Shutdown.
func (c *conn) Touch() {
	if c.state.Load()&(stIdleSet|stShutdown) == stIdleSet {
		c.l.srv.wheel.touch(c)
	}
}

// written accounts for n bytes taken by the socket from the queue; c.wmu is held. When a
// shutting-down connection's queue is empty its write side is shut; when one whose
// handler asked for it (NotifyDrained) holds at most Options.DrainedAt bytes, OnDrained is
// due (drain.go).
func (c *conn) written(n int) {
	st := c.state.Load()
	left := c.pending.Add(-int64(n))
	if left <= 0 && st&stShutdown != 0 {
		c.halfClose()
	}
	// Loaded after pending: see NotifyDrained.
	if left <= int64(c.l.srv.o.DrainedAt) && c.state.Load()&stWantDrain != 0 {
		c.drained()
	}
}

// writable is what both engines' writeSocket asks first: whether c may be written to
// (closed: net.ErrClosed; fenced: the queue dropped and c closed, ErrWriteFenced), with
// the state it read and the length of head and bufs together. c.wmu is held.
func (c *conn) writable(head []byte, bufs [][]byte) (st uint32, total int, err error) {
	st = c.state.Load()
	if st&(stFdClosed|stCloseReq) != 0 {
		return st, 0, net.ErrClosed
	}
	if c.writeFenced(st) {
		c.dropQueue()
		_ = c.closeSocketLocked(ErrWriteFenced)
		return st, 0, ErrWriteFenced
	}
	total = len(head)
	for _, b := range bufs {
		total += len(b)
	}
	return st, total, nil
}

// writeFenced reports whether Options.WriteFence refuses writes to c now: c was admitted
// (stIdleSet, in st) and the fence says no. The write lock or c.wmu is held.
func (c *conn) writeFenced(st uint32) bool {
	f := c.l.srv.o.WriteFence
	return f != nil && st&stIdleSet != 0 && !f()
}

// halfClose shuts the write side down, once: the peer reads what was sent, then EOF.
// The socket is not closed. c.wmu is held.
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
	if err := c.shutdownWrite(); err != nil {
		c.l.srv.log.Debug("listener: shutdown(SHUT_WR) failed", "err", err)
	}
}

// Write implements Conn.
func (c *conn) Write(b []byte) (int, error) {
	bufs := [1][]byte{b}
	return c.Writev(bufs[:])
}

// Writev implements Conn.
func (c *conn) Writev(bufs [][]byte) (int, error) { return c.writev(bufs, nil) }

// WriteAfter implements Conn.
func (c *conn) WriteAfter(b []byte, held sync.Locker) (int, error) {
	bufs := [1][]byte{b}
	return c.writev(bufs[:], held)
}

// writev writes bufs as one unit; held, if not nil, is unlocked once the write lock is
// taken (WriteAfter).
func (c *conn) writev(bufs [][]byte, held sync.Locker) (int, error) {
	size := 0
	for _, b := range bufs {
		size += len(b)
	}
	if size == 0 {
		if held != nil {
			held.Unlock()
		}
		return 0, nil
	}
	var hdr [wsMaxHeader]byte
	var head []byte
	if c.l.kind&kindWeb != 0 {
		head = appendWSHeader(hdr[:0], wsBinary, size)
	}
	mu := c.writeLock()
	mu.Lock()
	if held != nil {
		held.Unlock()
	}
	defer mu.Unlock()
	if c.state.Load()&stShutdown != 0 {
		return 0, net.ErrClosed
	}
	if err := c.writeLocked(head, bufs); err != nil {
		return 0, err
	}
	return size, nil
}

// writeLock returns the lock that makes one write one unit, in order with the others:
// c.wmu, or on tls and wss the tlsConn's smu. A TLS write is several records, each of
// which crypto/tls writes to the wire under its own lock; the wire then takes c.wmu to
// reach the socket (tls.go), so a write there cannot hold c.wmu. Lock order: smu, then
// crypto/tls's, then wmu.
func (c *conn) writeLock() *sync.Mutex {
	if c.l.kind&kindSecure != 0 {
		return &c.tls().smu
	}
	return &c.wmu
}

// writeLocked writes head (WebSocket framing, may be empty) and bufs as one unit, through
// TLS on tls and wss listeners. The write lock (writeLock) is held.
func (c *conn) writeLocked(head []byte, bufs [][]byte) error {
	if c.l.kind&kindSecure != 0 {
		return c.tls().seal(head, bufs)
	}
	return c.writeSocket(head, bufs)
}

// closeWith closes the connection; OnClose will get err (see closeSocketLocked).
func (c *conn) closeWith(err error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.closeSocketLocked(err)
}

// closeReason returns the error OnClose is to get, recorded by closeSocketLocked or by the
// engine's close (nil: none).
func (c *conn) closeReason() error {
	if e, ok := c.l.srv.reasons.LoadAndDelete(c); ok {
		return e.(error)
	}
	return nil
}

// halfCloseIfDrained shuts the write side down at once if nothing is queued (Shutdown);
// otherwise written does it when the queue drains. c.wmu is held.
func (c *conn) halfCloseIfDrained() {
	if c.state.Load()&(stFdClosed|stCloseReq) == 0 && c.pending.Load() <= 0 {
		c.halfClose()
	}
}

// Close implements Conn.
func (c *conn) Close() error { return c.closeWith(nil) }

// Shutdown implements Conn.
func (c *conn) Shutdown() {
	mu := c.writeLock()
	mu.Lock()
	defer mu.Unlock()
	if c.state.Load()&stShutdown != 0 {
		return
	}
	if c.l.kind&kindWeb != 0 {
		_ = c.writeLocked(wsCloseNormal[:], nil)
	}
	if c.l.kind&kindSecure != 0 {
		// close_notify: the peer's TLS reads end cleanly, not with a truncation error.
		_ = c.tls().tc.CloseWrite()
		c.wmu.Lock() // for the state below, as on tcp and ws (SetIdleTimeout)
		defer c.wmu.Unlock()
	}
	c.state.Or(stShutdown)
	c.halfCloseIfDrained()
	s := c.l.srv
	s.wheel.reset(c, s.o.LingerTimeout)
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
	cs := c.tls().tc.ConnectionState()
	return &cs
}
