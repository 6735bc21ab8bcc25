package listener

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
)

// MQTT over TLS (tls listeners) and WebSocket over TLS (wss), with Go's crypto/tls, which
// gets security fixes with every Go release, on both engines.
//
// crypto/tls wants a blocking net.Conn underneath. It gets tlsWire, which reads the
// ciphertext that the engine's reader received (the reader: a poller, epoll_tls_linux.go,
// or the connection's goroutine on the portable engine, portable_read.go) and writes
// through our write path, which never blocks (conn.writeSocket), and is driven in two
// ways:
//
//   - The handshake runs in a goroutine: tls.Conn.Handshake, whose reads wait on the wire
//     until the reader brings bytes. It is active work, and bounded: the connect timeout,
//     counted from the accept, closes the connection, which ends the wait. The goroutine
//     starts only when the client's first record (its ClientHello) is complete, so a
//     client that connects and says nothing, or dribbles its ClientHello, holds none; and
//     no more than Options.MaxTLSHandshakes run at once, the others waiting their turn
//     without a goroutine (tls_gate.go).
//   - Once the handshake is done the goroutine ends and the reader drives the tls.Conn:
//     it lends the bytes it read to the wire (no copy) and calls tls.Conn.Read
//     until the wire has nothing left and says so with a net.Error whose Temporary() is
//     true. crypto/tls (Go 1.26, conn.go readRecordOrCCS) returns such an error without
//     making it the connection's error, and keeps a partial record in its input buffer
//     for the next read; TestTLSWouldBlockNotSticky holds it to that. The plaintext is
//     collected in the reader's scratch buffer (pumpBufs) and handed to Handler.OnData,
//     or on wss to the same upgrade and frame decoder as ws (ws.go deliverWeb).
//
// Between the two, bytes that arrive while the goroutine still delivers what came with
// the end of the handshake are copied into a pooled buffer (pend) and delivered by that
// goroutine, in order: one goroutine at a time pumps a connection (the pumping flag),
// which is also what keeps handler calls from overlapping.
//
// A close that the reader reports while a goroutine still works on received bytes (a client
// that sends its Finished, a CONNECT and its FIN at once) is left to that goroutine
// (owed): it reads what was received to its end, so the connection opens and delivers
// those bytes before OnClose, as a TCP connection would.
//
// Writes go tls.Conn.Write → tlsWire.Write → the socket, and what it does not take is
// queued (conn.writeSocket). Several buffers of one Writev are gathered into full records
// first (seal), so that a PUBLISH is one record, not one per buffer. A Writev holds smu,
// not wmu: crypto/tls may write on its own (the handshake's flights, an alert, an answer
// to a KeyUpdate) from the goroutine that reads, so the wire takes wmu for each record it
// writes, and smu only keeps one Writev's records together (conn.writeLock).
//
// What an idle TLS connection holds: the tls.Conn (its cipher states, the handshake
// buffer; not its input buffers: tls_input.go) and this record; no ciphertext or plaintext
// buffer of ours, and on the epoll engine no goroutine.

// Phases of a tlsConn, guarded by its mu.
const (
	tlsHello     uint8 = iota // waiting for the first record; no goroutine yet
	tlsQueued                 // the first record came; waiting for a handshake slot (tls_gate.go)
	tlsHandshake              // the handshake goroutine runs
	tlsOpen                   // handshake done: the reader drives the tls.Conn
	tlsDone                   // closed
)

// TLS record layout (RFC 8446 section 5.1), for recognising a complete first record.
const (
	recordHeaderLen     = 5
	recordTypeHandshake = 22
	maxRecordPayload    = 1<<14 + 256 // TLS 1.3's bound on ciphertext; 1.2 allows 2048 more
)

// tlsMaxPending bounds the ciphertext one connection may have waiting in pend (during the
// handshake, or while its handshake goroutine delivers): enough for any handshake flight
// and for a client that pipelines a large PUBLISH behind its Finished; more closes the
// connection rather than growing the server's memory.
const tlsMaxPending = 4<<20 + 64<<10

// tlsMaxHello bounds what a connection may send before its handshake starts (while its
// first record arrives, or while it waits for a slot): a ClientHello is a few KiB, and a
// client sends nothing more before the server's answer (bifrost accepts no 0-RTT data).
const tlsMaxHello = 64 << 10

var (
	// errWouldBlock is what tlsWire.Read returns on an open connection that has no
	// ciphertext left: crypto/tls passes a temporary error up without keeping it.
	errWouldBlock net.Error = wouldBlock{}
	// errTLSBacklog closes a connection that sent more than tlsMaxPending ahead.
	errTLSBacklog = errors.New("listener: too much TLS input waiting for the handshake")
)

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "listener: no more TLS input for now" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// tlsConn is a tls or wss connection: our conn record, which the handler sees, and the
// TLS state. The conn is its first field, so that a *conn of a tls or wss listener is a
// *tlsConn (conn.tls).
//
// Locking: mu guards phase, pumping, again, eof, owed, pend, off, src and wake; it is
// never held while calling crypto/tls or the handler. tc is set once, under mu, before
// the handshake goroutine starts; tlsWeb belongs to the goroutine that pumps. smu is the
// write lock (conn.writeLock).
type tlsConn struct {
	conn
	tc     *tls.Conn
	tlsWeb // wss: the WebSocket decoder's state (ws.go)

	smu     sync.Mutex
	mu      sync.Mutex
	phase   uint8
	pumping bool          // a goroutine is reading tc; others add their bytes to pend
	again   bool          // bytes were added to pend while pumping: read again
	eof     bool          // the socket is closed: after pend, the wire reads io.EOF
	owed    bool          // closed while a goroutine worked: it finishes the close (see ended)
	pend    *[]byte       // ciphertext copied, waiting to be read (bufpool); nil when none
	off     int           // bytes of pend already read
	src     []byte        // ciphertext lent by the reader for the call it is making
	wake    chan struct{} // tlsHandshake: bytes arrived or the connection closed
}

// tlsWire is the net.Conn under the tls.Conn: the same record with the methods crypto/tls
// calls on its transport (the conversion costs nothing; the embedded conn's Write, the
// handler's plaintext write, would be the wrong one).
type tlsWire tlsConn

// tls returns the tlsConn whose first field c is: c must be a tls or wss listener's.
func (c *conn) tls() *tlsConn { return (*tlsConn)(unsafe.Pointer(c)) }

// received takes bytes the reader read; bufs are the reader's, for this call.
func (t *tlsConn) received(data []byte, bufs *pumpBufs) {
	if t.state.Load()&(stShutdown|stClosing|stClosed) != 0 {
		return // shut down or closed: dropped
	}
	t.mu.Lock()
	switch {
	case t.phase == tlsDone:
		t.mu.Unlock()
		return
	case t.phase == tlsOpen && !t.pumping:
		t.pumping, t.src = true, data
		t.mu.Unlock()
		t.pump(bufs)
		return
	}
	// Before the handshake is done, or while another goroutine pumps: keep a copy.
	have := 0
	if t.pend != nil {
		have = len(*t.pend) - t.off
	}
	limit := tlsMaxPending
	if t.phase <= tlsQueued {
		limit = tlsMaxHello
	}
	if have+len(data) > limit {
		t.mu.Unlock()
		_ = t.closeWith(errTLSBacklog)
		return
	}
	if t.pend == nil {
		t.pend = bufpool.Get(len(data))
	} else {
		t.pend = bufpool.Grow(t.pend, len(data))
	}
	*t.pend = append(*t.pend, data...)
	switch t.phase {
	case tlsHello:
		if !firstRecord((*t.pend)[t.off:]) {
			t.mu.Unlock()
			return
		}
		s := t.l.srv
		switch s.tlsGate.admit(t) {
		case gateRun:
			t.beginLocked()
			t.mu.Unlock()
			s.goroutine("tls handshake", func() { s.handshakes(t) })
		case gateWait:
			t.phase = tlsQueued
			t.mu.Unlock()
		default:
			t.mu.Unlock()
			s.log.Debug("listener: TLS handshake refused: too many in progress", slog.String("listener", t.l.name),
				slog.String("remote", t.RemoteAddr().String()))
			_ = t.closeWith(errTLSBusy)
		}
		return
	case tlsHandshake:
		select {
		case t.wake <- struct{}{}:
		default:
		}
	case tlsOpen:
		t.again = true
	}
	t.mu.Unlock()
}

// beginLocked makes the connection's TLS state and enters the handshake phase, for the
// goroutine about to run it. t.mu is held.
func (t *tlsConn) beginLocked() {
	t.phase = tlsHandshake
	t.wake = make(chan struct{}, 1)
	t.tc = tls.Server((*tlsWire)(t), t.l.certs.base)
}

// begin starts the handshake of a connection that waited for a slot, and reports false if
// it closed meanwhile (then there is nothing to do).
func (t *tlsConn) begin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != tlsQueued {
		return false
	}
	t.beginLocked()
	return true
}

// gone reports whether the connection has closed, as far as the atomic state tells.
func (t *tlsConn) gone() bool { return t.state.Load()&(stClosing|stClosed) != 0 }

// handshakes is a handshake goroutine: it runs t's handshake, then those of the
// connections that wait for a slot, one after another, until none waits.
func (s *Server) handshakes(t *tlsConn) {
	for ; t != nil; t = s.tlsGate.next() {
		t.handshake()
	}
}

// firstRecord reports whether b holds the client's first record whole, or enough to see
// that it is no TLS handshake (crypto/tls then refuses it with the right alert).
func firstRecord(b []byte) bool {
	if len(b) < recordHeaderLen {
		return false
	}
	if b[0] != recordTypeHandshake {
		return true
	}
	n := int(b[3])<<8 | int(b[4])
	return n > maxRecordPayload || len(b) >= recordHeaderLen+n
}

// handshake runs the TLS handshake, in a handshake goroutine, then opens the connection
// (tls; wss opens at the WebSocket upgrade) and delivers what came with the handshake's
// end before handing the connection over to the reader.
func (t *tlsConn) handshake() {
	if err := t.tc.Handshake(); err != nil {
		if !errors.Is(err, io.EOF) {
			t.l.srv.log.Debug("listener: TLS handshake failed", slog.String("listener", t.l.name),
				slog.String("remote", t.RemoteAddr().String()), slog.Any("err", err))
		}
		t.mu.Lock()
		t.phase, t.wake = tlsDone, nil
		owed := t.finishLocked()
		t.mu.Unlock()
		_ = t.closeWith(fmt.Errorf("listener: TLS handshake: %w", err))
		if owed {
			t.finish()
		}
		return
	}
	t.mu.Lock()
	t.phase, t.wake, t.pumping = tlsOpen, nil, true
	t.mu.Unlock()
	if t.l.kind&kindWeb == 0 {
		t.open()
	}
	s := t.l.srv
	bufs := s.tlsBufs.Get().(*pumpBufs)
	t.pump(bufs)
	s.tlsBufs.Put(bufs)
}

// pump reads every record the wire has and delivers the plaintext, gathered in
// bufs.plain, until no bytes are left; then it stops pumping, unless bytes came
// meanwhile, and finishes a close that came meanwhile. t.pumping is set: this goroutine
// is the only one reading t.tc. crypto/tls reads the records into bufs.input, lent for
// the time (tls_input.go).
func (t *tlsConn) pump(bufs *pumpBufs) {
	for {
		lendInput(t.tc, bufs.input)
		t.readPlain(bufs.plain, bufs.loop)
		if !reclaimInput(t.tc) {
			bufs.input = make([]byte, 0, tlsInputSize) // the old one stays with t.tc
		}
		t.mu.Lock()
		t.src = nil // read to its end, or the connection failed
		if t.again && t.phase == tlsOpen {
			t.again = false
			t.mu.Unlock()
			continue
		}
		t.pumping, t.again = false, false
		owed := t.finishLocked()
		t.mu.Unlock()
		if owed {
			t.finish()
		}
		return
	}
}

// readPlain calls tls.Conn.Read until the wire would block, delivering buf whenever it is
// full and at the end; loop is the poller it runs on, or -1 (see conn.onData).
func (t *tlsConn) readPlain(buf []byte, loop int) {
	n := 0
	for {
		k, err := t.tc.Read(buf[n:])
		n += k
		if n > 0 && (n == len(buf) || err != nil) {
			if !t.deliver(buf[:n], loop) {
				return
			}
			n = 0
		}
		switch {
		case err == nil:
		case errors.Is(err, errWouldBlock):
			return
		default:
			// io.EOF is the peer's close_notify; any other error was sent as an alert.
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("listener: TLS: %w", err)
			}
			_ = t.closeWith(err)
			return
		}
	}
}

// deliver hands plaintext to the handler, or on wss to the WebSocket layer (deliverWeb).
// It reports whether the connection is still worth reading.
func (t *tlsConn) deliver(p []byte, loop int) bool {
	if t.l.kind&kindWeb == 0 {
		t.onData(p, loop)
	} else if !t.deliverWeb(p, loop) {
		return false
	}
	return t.state.Load()&(stShutdown|stClosing|stClosed) == 0
}

// ended is called once, by the engine's goroutine that closed the socket. If
// a goroutine is working on received bytes (the handshake, or a pump) the close is left
// to it: it reads what was received, then the wire's io.EOF, and finishes the close when
// it is done. Otherwise the close is finished here.
func (t *tlsConn) ended() {
	t.mu.Lock()
	t.eof = true
	if t.wake != nil {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	if t.phase == tlsHandshake || t.pumping {
		t.owed = true
		t.mu.Unlock()
		return
	}
	t.owed = true
	t.finishLocked()
	t.mu.Unlock()
	t.finish()
}

// finishLocked ends the TLS side of a closed connection, whose close is owed to the
// caller: pooled bytes go back, and nothing is read any more. It reports whether the
// caller is to call finish. mu is held.
func (t *tlsConn) finishLocked() bool {
	if !t.owed {
		return false
	}
	t.owed = false
	t.phase = tlsDone
	if t.pend != nil {
		bufpool.Put(t.pend)
		t.pend, t.off = nil, 0
	}
	return true
}

// finish ends a closed connection, once: the WebSocket layer lets go of its state (wss),
// and OnClose follows as for any conn.
func (t *tlsConn) finish() {
	if t.l.kind&kindWeb != 0 {
		t.endWeb()
	}
	t.closed()
}

// seal encrypts head and bufs and writes them, as few records as they fit in. t.smu is
// held. One buffer goes to crypto/tls as it is; several are gathered into full records
// (of at most 16 KiB of plaintext) first, in a pooled buffer.
func (t *tlsConn) seal(head []byte, bufs [][]byte) error {
	total, pieces := len(head), 0
	if len(head) > 0 {
		pieces++
	}
	var one []byte
	for _, b := range bufs {
		if len(b) > 0 {
			total += len(b)
			pieces++
			one = b
		}
	}
	var err error
	switch {
	case pieces == 0:
		return nil
	case pieces == 1 && len(head) == 0:
		_, err = t.tc.Write(one)
	default:
		pb := bufpool.Get(min(total, 1<<14)) // a class size: at most 16 KiB here
		rec := (*pb)[:0]
		add := func(p []byte) {
			for len(p) > 0 && err == nil {
				k := min(len(p), cap(rec)-len(rec))
				rec, p = append(rec, p[:k]...), p[k:]
				if len(rec) == cap(rec) {
					_, err = t.tc.Write(rec)
					rec = rec[:0]
				}
			}
		}
		add(head)
		for _, b := range bufs {
			add(b)
		}
		if err == nil && len(rec) > 0 {
			_, err = t.tc.Write(rec)
		}
		*pb = rec
		bufpool.Put(pb)
	}
	if err != nil {
		_ = t.closeWith(err)
	}
	return err
}

// Read gives crypto/tls the ciphertext received: what is in pend, then what the reader
// lends. During the handshake it waits for more; afterwards it says it would block.
func (w *tlsWire) Read(p []byte) (int, error) {
	t := (*tlsConn)(w)
	t.mu.Lock()
	for {
		if t.pend != nil {
			n := copy(p, (*t.pend)[t.off:])
			t.off += n
			if t.off == len(*t.pend) {
				bufpool.Put(t.pend)
				t.pend, t.off = nil, 0
			}
			t.mu.Unlock()
			return n, nil
		}
		if len(t.src) > 0 {
			n := copy(p, t.src)
			t.src = t.src[n:]
			t.mu.Unlock()
			return n, nil
		}
		switch {
		case t.eof || t.phase == tlsDone:
			t.mu.Unlock()
			return 0, io.EOF
		case t.phase == tlsOpen:
			t.mu.Unlock()
			return 0, errWouldBlock
		}
		wake := t.wake
		t.mu.Unlock()
		<-wake // bytes, or the close (the connect timeout closes a stalled handshake)
		t.mu.Lock()
	}
}

// Write sends what crypto/tls wrote (a record, or the handshake's flight), under the
// tls.Conn's write lock, taking c.wmu as every write to the socket does. b is crypto/tls's
// pooled buffer: writeSocket copies what it keeps.
func (w *tlsWire) Write(b []byte) (int, error) {
	c := &w.conn
	bufs := [1][]byte{b}
	c.wmu.Lock()
	err := c.writeSocket(nil, bufs[:])
	c.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close closes the connection: crypto/tls calls it from tls.Conn.Close.
func (w *tlsWire) Close() error { return w.conn.closeWith(nil) }

func (w *tlsWire) LocalAddr() net.Addr  { return w.conn.LocalAddr() }
func (w *tlsWire) RemoteAddr() net.Addr { return w.conn.RemoteAddr() }

// Deadlines are the wheel's business: the connect timeout bounds the handshake, and
// writes never block.
func (w *tlsWire) SetDeadline(time.Time) error      { return nil }
func (w *tlsWire) SetReadDeadline(time.Time) error  { return nil }
func (w *tlsWire) SetWriteDeadline(time.Time) error { return nil }
