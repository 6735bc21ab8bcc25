//go:build !linux

package listener

import (
	"bytes"
	"errors"
	"net"

	"github.com/lesismal/nbio"
)

// What a conn does with a socket that nbio serves (every transport where our own loop does
// not run: loop_other.go): its writes, its close, its addresses. The transport's state
// hangs off nbio's record's session: the *websocket.Conn for ws, the *tlsConn that embeds
// the conn for tls and wss.

// connEngine is the part of a conn that nbio's engine needs: its record of the socket.
type connEngine struct {
	nc *nbio.Conn
}

// errOpenWrite closes a TCP connection whose OnOpen wrote more than its socket took.
var errOpenWrite = errors.New("listener: OnOpen wrote more than the socket takes at once")

// writePlain writes head and bufs to the socket as one unit (writeRaw). c.wmu is held.
func (c *conn) writePlain(head []byte, bufs [][]byte) error { return c.writeRaw(head, bufs) }

// fdNum returns the connection's descriptor.
func (c *conn) fdNum() int { return c.nc.Hash() }

// closeReason returns the error OnClose is to get, as nbio recorded it.
func (c *conn) closeReason() error {
	_, err := c.nc.IsClosed()
	return err
}

// halfCloseIfDrained shuts the write side down at once if nothing is queued (Shutdown);
// otherwise written does it when the queue drains.
func (c *conn) halfCloseIfDrained() {
	c.nc.Lock()
	if closed, _ := c.nc.IsClosed(); !closed && c.pending.Load() <= 0 {
		c.halfClose()
	}
	c.nc.Unlock()
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

// closeWith closes the connection; OnClose will get err. While the connection is being
// added to the engine (OnOpen runs then, and the wheel may already expire it) the close is
// left to admitted: closing the descriptor before nbio has registered it would let another
// connection reuse its number and be overwritten in nbio's table.
func (c *conn) closeWith(err error) error {
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

// RemoteAddr implements Conn.
func (c *conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr implements Conn.
func (c *conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }
