//go:build !linux || bifrost_portable

package listener

import (
	"io"
	"net"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
)

// What a conn does with its socket on the portable engine: its writes, its close, its
// addresses.
//
// Writes never block the writer. Writev copies its bytes into the connection's queue
// (out); if no write goroutine runs, the socket is given at once what it takes without
// waiting (writeNow, on unix), as on the epoll engine, and what it does not take stays
// queued for a write goroutine, started then (stWriting), which sends the queue a batch
// at a time and ends when it is empty. An idle connection has none, and a burst of writes
// shares one. pending counts the queue and the batch being sent: Buffered, Shutdown's half
// close and the drain notices see what the socket has not taken (written).

// connEngine is what a conn holds of its socket on the portable engine.
type connEngine struct {
	nc  *net.TCPConn
	out *[]byte // bytes written and not yet taken by the socket (pooled); guarded by c.wmu
	fd  int32   // the socket's descriptor, for writeNow (unix; -1 elsewhere)
}

// pastDeadline is a read deadline that has passed: it wakes a blocked Read at once.
var pastDeadline = time.Unix(1, 0)

// writeSocket writes head and bufs as one unit: queued behind what the write goroutine has
// not sent yet if it runs; else the socket takes what it can now, and the write goroutine
// is started for the rest. A fenced write (Options.WriteFence) drops the queue and closes
// the connection instead; the write goroutine asks the fence before each chunk. c.wmu is
// held.
func (c *conn) writeSocket(head []byte, bufs [][]byte) error {
	_, total, err := c.writable(head, bufs)
	if err != nil {
		return err
	}
	if total == 0 {
		return nil
	}
	if c.out == nil {
		c.out = bufpool.Get(total)
	} else {
		c.out = bufpool.Grow(c.out, total)
	}
	q := append(*c.out, head...)
	for _, b := range bufs {
		q = append(q, b...)
	}
	*c.out = q
	if c.state.Load()&stWriting != 0 {
		c.pending.Add(int64(total))
		return nil
	}
	// No write goroutine runs, so the queue holds these bytes alone. The socket is open:
	// it is closed with c.wmu held, once stFdClosed is set.
	n, err := writeNow(c.fd, q)
	if err != nil {
		c.dropQueue()
		_ = c.closeSocketLocked(err)
		return err
	}
	if n == len(q) {
		c.dropQueue()
		return nil
	}
	*c.out = q[:copy(q, q[n:])]
	c.pending.Add(int64(len(q) - n))
	c.state.Or(stWriting)
	c.l.srv.spawn(writeLabels, c.writeLoop)
	return nil
}

// writeLoop is the write goroutine: it takes what is queued, sends it (blocking, without
// the lock), accounts for it (written), and so on until nothing is queued. A write error
// closes the connection. If the reader has closed the connection meanwhile, leaving the
// socket to it (readEnded), it closes the socket as it ends.
func (c *conn) writeLoop() {
	for {
		c.wmu.Lock()
		b := c.out
		if b == nil {
			c.state.And(^uint32(stWriting))
			if c.state.Load()&stFdClosed != 0 {
				_ = c.nc.Close()
			}
			c.wmu.Unlock()
			return
		}
		c.out = nil
		c.wmu.Unlock()
		// In chunks, each accounted as it goes: the queue goes down as the peer reads,
		// so that a drain notice at Options.DrainedAt comes while bytes still wait, as
		// on the epoll engine, not only when a whole backlog has gone out.
		var err error
		for q := *b; len(q) > 0 && err == nil; {
			if c.writeFenced(c.state.Load()) {
				c.wmu.Lock()
				_ = c.closeSocketLocked(ErrWriteFenced)
				c.dropQueue()
				c.wmu.Unlock()
				break
			}
			var n int
			n, err = c.nc.Write(q[:min(len(q), writeChunk)])
			q = q[n:]
			c.wmu.Lock()
			if n > 0 {
				c.written(n)
			}
			if err != nil {
				_ = c.closeSocketLocked(err)
				c.dropQueue()
			}
			c.wmu.Unlock()
		}
		bufpool.Put(b)
	}
}

// writeChunk is the most the write goroutine hands the socket at once.
const writeChunk = 64 << 10

// dropQueue gives the queue's buffer back. c.wmu is held.
func (c *conn) dropQueue() {
	if c.out != nil {
		bufpool.Put(c.out)
		c.out = nil
	}
}

// closeSocketLocked asks for the connection to be closed, with err as OnClose's reason: it
// records the reason and wakes the reader (a read deadline in the past), which closes the
// socket and delivers the close (readEnded). What the write goroutine holds is still sent
// (a refused upgrade's answer, a TLS alert: what the epoll engine's socket would have
// taken), but for at most Options.LingerTimeout: a peer that does not read cannot keep the
// socket. c.wmu is held.
func (c *conn) closeSocketLocked(err error) error {
	st := c.state.Load()
	if st&(stFdClosed|stCloseReq) != 0 {
		return nil
	}
	if err != nil {
		c.l.srv.reasons.Store(c, err)
	}
	c.state.Or(stCloseReq)
	if st&stWriting != 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.l.srv.o.LingerTimeout))
	}
	_ = c.nc.SetReadDeadline(pastDeadline)
	if st&stPaused != 0 {
		c.readsChanged() // its reader waits for a resume: wake it to close
	}
	return nil
}

// readEnded closes the connection once its reader has stopped, and delivers the close.
// ioErr is what the read said (io.EOF: the peer closed); if a close was asked for
// (closeSocketLocked), the reason given there wins. The socket is closed here, unless the
// write goroutine is still sending what was written before a close asked for: then it
// closes the socket when it ends. Called once, by the reader.
func (c *conn) readEnded(ioErr error) {
	c.wmu.Lock()
	st := c.state.Load()
	c.state.Or(stFdClosed)
	if st&(stWriting|stCloseReq) != stWriting|stCloseReq {
		_ = c.nc.Close() // a write under way fails, and its goroutine ends
		c.dropQueue()
	}
	c.wmu.Unlock()
	if st&stCloseReq == 0 {
		if ioErr == io.EOF {
			c.state.Or(stPeerClose)
		} else {
			c.l.srv.reasons.Store(c, ioErr)
		}
	}
	if c.l.kind&kindSecure != 0 {
		c.tls().ended() // a goroutine may still be reading what came before
		return
	}
	c.closed()
}

// shutdownWrite half-closes the socket: the peer reads EOF after what was sent. c.wmu is
// held.
func (c *conn) shutdownWrite() error { return c.nc.CloseWrite() }

// RemoteAddr implements Conn.
func (c *conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr implements Conn.
func (c *conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }
