package bridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A conn is one connection to the remote. Its writer (serve's goroutine) sends the
// queue's messages and PINGREQs; its reader (readLoop) handles what the remote sends and
// answers PUBLISHes with their acknowledgements. Both write through w under wmu.
type conn struct {
	br        *Bridge
	nc        net.Conn
	v         packet.Version
	keepAlive time.Duration
	window    int    // QoS 1 and 2 messages in flight at most
	maxPacket uint32 // the remote's Maximum Packet Size; 0: the protocol's
	present   bool   // the remote resumed the bridge's session
	subID     uint16 // the SUBSCRIBE's packet id, until its SUBACK

	closing atomic.Bool // the bridge is stopping: writes have a second left

	wmu       sync.Mutex
	w         *bufio.Writer
	lastWrite time.Time // wmu
	scratch   []byte    // wmu: encoding buffer
	forgot    bool      // wmu: store entries of messages not sent were deleted; commit after wmu
	acks      []heldAck // wmu: acknowledgements for the remote, in order, some held (inbound.go)
	out       []*msg    // the writer's: the messages sendReady sends
}

var errClosing = errors.New("bridge: closing")

// connect dials the remote, sends CONNECT and waits for a CONNACK that accepts it.
func (br *Bridge) connect(ctx context.Context) (*conn, error) {
	c := &br.cfg
	ka := time.Duration(c.KeepAlive)
	nc, err := dial(ctx, c, ka)
	if err != nil {
		return nil, err
	}
	cn := &conn{br: br, nc: nc, v: br.version, keepAlive: ka, window: c.MaxInflight, w: bufio.NewWriterSize(nc, 32<<10)}
	cp := packet.Connect{Version: br.version, CleanStart: c.CleanSession, KeepAlive: uint16(ka / time.Second),
		ClientID: []byte(c.ClientID)}
	cp.Bridge = br.version != packet.V5 && *c.TryPrivate && !br.noPrivate
	if c.Username != "" {
		cp.UsernameFlag, cp.Username = true, []byte(c.Username)
	}
	if c.Password != "" {
		cp.PasswordFlag, cp.Password = true, []byte(c.Password)
	}
	if br.version == packet.V5 {
		if !c.CleanSession {
			cp.Props.SessionExpiry = packet.Some[uint32](0xFFFFFFFF) // as a 3.1.1 persistent session
		}
		// The remote's window into the bridge is max_inflight too: what it may send at QoS
		// 1 and 2 unacknowledged, and so how many QoS 2 packet ids the bridge keeps.
		cp.Props.ReceiveMaximum = packet.Some(uint16(c.MaxInflight))
	}
	// The handshake has one keep alive period, and ends at once when the bridge stops.
	_ = nc.SetDeadline(time.Now().Add(ka))
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	if _, err := nc.Write(cp.AppendTo(nil, br.version)); err != nil {
		stop()
		nc.Close()
		return nil, err
	}
	ack, err := cn.readConnack()
	if !stop() || err != nil {
		nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	if ack.Code != packet.Success {
		nc.Close()
		if cp.Bridge && ack.Code == packet.UnsupportedProtocolVersion {
			// As Mosquitto does: a remote that does not know the bridge marker gets a
			// plain 3.1.1 CONNECT from now on, and may echo the bridge's messages.
			br.noPrivate = true
			br.log.Warn("bridge: the remote refuses the bridge marker (try_private); connecting without it")
		}
		return nil, fmt.Errorf("bridge: remote refused the connection: %s", ack.Code)
	}
	cn.present = ack.SessionPresent
	if !ack.SessionPresent {
		clear(br.inbound) // the remote starts the session anew: no QoS 2 id is pending
	}
	if br.version == packet.V5 {
		if rm := ack.Props.ReceiveMaximum; rm.Set && int(rm.V) < cn.window {
			cn.window = int(rm.V)
		}
		if mp := ack.Props.MaximumPacketSize; mp.Set {
			cn.maxPacket = mp.V
		}
		if sk := ack.Props.ServerKeepAlive; sk.Set && sk.V > 0 {
			cn.keepAlive = time.Duration(sk.V) * time.Second // [MQTT-3.2.2-21]
		}
	}
	return cn, nil
}

// readConnack reads the first packet, which must be a CONNACK [MQTT-3.2.0-1]. It reads
// byte by byte up to the packet's end, so nothing the remote sends after it is consumed.
func (cn *conn) readConnack() (*packet.Connack, error) {
	var hdr [5]byte
	n := 0
	for {
		if _, err := cn.nc.Read(hdr[n : n+1]); err != nil {
			return nil, err
		}
		n++
		h, hn, err := packet.ParseHeader(hdr[:n], cn.v)
		if err != nil {
			return nil, err
		}
		if hn == 0 {
			if n == len(hdr) {
				return nil, errors.New("bridge: bad CONNACK header")
			}
			continue
		}
		if h.Type != packet.CONNACK || h.Remaining > 1<<16 {
			return nil, fmt.Errorf("bridge: first packet from the remote is %s, not CONNACK", h.Type)
		}
		body := make([]byte, h.Remaining)
		if _, err := io.ReadFull(cn.nc, body); err != nil {
			return nil, err
		}
		var ack packet.Connack
		if err := ack.Decode(h, body, cn.v); err != nil {
			return nil, err
		}
		return &ack, nil
	}
}

// serve runs the connection until it breaks or ctx is cancelled, and returns why.
func (cn *conn) serve(ctx context.Context) error {
	readErr := make(chan error, 1)
	go func() { readErr <- cn.readLoop() }()
	// A write blocked on a remote that stopped reading ends a second after the bridge
	// stops, which is also the DISCONNECT's time to go out.
	stop := context.AfterFunc(ctx, func() {
		cn.closing.Store(true)
		_ = cn.nc.SetWriteDeadline(time.Now().Add(time.Second))
	})
	defer stop()
	err := cn.writeLoop(ctx, readErr)
	if errors.Is(err, errClosing) {
		// A normal DISCONNECT: the remote publishes no will of the bridge's.
		cn.wmu.Lock()
		d := packet.Disconnect{}
		_, _ = cn.w.Write(d.AppendTo(cn.scratch[:0], cn.v))
		_ = cn.w.Flush()
		cn.wmu.Unlock()
	}
	cn.nc.Close()
	if !errors.Is(err, errReader) {
		<-readErr // the reader ends on the closed connection
	}
	cn.br.q.releaseSub(cn.subID)
	return err
}

// errReader marks an error writeLoop took from the reader, whose channel is then empty.
var errReader = errors.New("bridge: connection lost")

// writeLoop subscribes, resends what was in flight, then sends queued messages as the
// window allows, and a PINGREQ when nothing was written for half a keep alive period.
func (cn *conn) writeLoop(ctx context.Context, readErr <-chan error) error {
	br := cn.br
	cn.wmu.Lock()
	err := cn.subscribe()
	if err == nil {
		for _, m := range br.q.unacked() {
			if m.rec {
				err = cn.writeAckLocked(packet.PUBREL, m.id)
			} else {
				err = cn.writePublish(m)
			}
			if err != nil {
				break
			}
			br.resent.Add(1)
		}
	}
	if err == nil {
		err = cn.flush()
	}
	cn.wmu.Unlock()
	cn.commitForgotten()
	if err != nil {
		return err
	}
	tick := time.NewTicker(cn.keepAlive / 2)
	defer tick.Stop()
	for {
		if err := cn.drain(ctx, readErr); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return errClosing
		case err := <-readErr:
			return fmt.Errorf("%w: %w", errReader, err)
		case <-br.wake:
		case <-tick.C:
			cn.wmu.Lock()
			var err error
			if time.Since(cn.lastWrite) >= cn.keepAlive/2 {
				_, err = cn.w.Write(packet.Pingreq{}.AppendTo(cn.scratch[:0], cn.v))
				if err == nil {
					err = cn.flush()
				}
			}
			cn.wmu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

// subscribe sends one SUBSCRIBE with every in route's remote filter: 5.0 with No Local
// and Retain As Published, so the remote neither echoes the bridge's own messages nor
// clears their retain flag. wmu is held.
func (cn *conn) subscribe() error {
	var s packet.Subscribe
	for _, r := range cn.br.routes {
		if r.in {
			s.Subscriptions = append(s.Subscriptions, packet.Subscription{Filter: []byte(r.remoteFilter), QoS: r.qos,
				NoLocal: cn.v == packet.V5, RetainAsPublished: cn.v == packet.V5})
		}
	}
	if len(s.Subscriptions) == 0 {
		return nil
	}
	cn.subID = cn.br.q.reserveSub()
	s.PacketID = cn.subID
	_, err := cn.w.Write(s.AppendTo(cn.scratch[:0], cn.v))
	return err
}

// drain sends what the queue lets go now, in one flush.
func (cn *conn) drain(ctx context.Context, readErr <-chan error) error {
	err := cn.sendReady(ctx, readErr)
	cn.commitForgotten()
	return err
}

// commitForgotten commits the deletions writePublish staged. wmu is not held.
func (cn *conn) commitForgotten() {
	cn.wmu.Lock()
	forgot := cn.forgot
	cn.forgot = false
	cn.wmu.Unlock()
	if forgot {
		cn.br.q.commit()
	}
}

// sendReady writes the acknowledgements the store released and what the queue lets go
// now, and flushes them. A stored QoS 2 message going out for the first time waits, with
// those behind it, until the store has its packet id (awaitSent). Only the writer pops
// the queue, so the order holds.
func (cn *conn) sendReady(ctx context.Context, readErr <-chan error) error {
	br := cn.br
	out := cn.out[:0]
	staged := false
	for {
		m := br.q.next(cn.window)
		if m == nil {
			break
		}
		staged = br.q.sent(m) || staged
		out = append(out, m)
	}
	cn.out = out
	if staged {
		if err := cn.awaitSent(ctx, readErr); err != nil {
			return err
		}
	}
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	wrote, err := cn.writeAcks()
	if err != nil {
		return err
	}
	for i, m := range out {
		out[i] = nil
		if err := cn.writePublish(m); err != nil {
			return err
		}
		wrote = true
	}
	if wrote {
		return cn.flush()
	}
	return nil
}

// awaitSent commits the packet ids sendReady staged and waits until the store has them:
// a restart must send such a message again under the same id, or the remote, which may
// hold that id awaiting its PUBREL, would take another message under it for a
// duplicate and drop it. The writer waits, not the reader; wmu is not held.
func (cn *conn) awaitSent(ctx context.Context, readErr <-chan error) error {
	br := cn.br
	j := br.q.j
	gen := j.AwaitDurable(br.sendGen, br.onDurable)
	br.sendGen = gen
	j.Commit()
	for br.ackDone.Load() < gen {
		select {
		case <-br.durable:
		case <-ctx.Done():
			return errClosing
		case err := <-readErr:
			return fmt.Errorf("%w: %w", errReader, err)
		}
	}
	if br.ackFailed.Load() >= gen {
		return errStoreFailed
	}
	return nil
}

// writePublish encodes m for the remote. An expired message or one above the remote's
// Maximum Packet Size is not sent: it leaves the queue and is counted. wmu is held.
func (cn *conn) writePublish(m *msg) error {
	br := cn.br
	p := packet.Publish{Topic: m.topic(), Payload: m.payload(), QoS: m.qos, Retain: m.retain, Dup: m.dup, PacketID: m.id}
	secs, has, alive := m.remaining(time.Now())
	if !alive {
		br.expired.Add(1)
		cn.forgot = br.q.forget(m) || cn.forgot
		return nil
	}
	if cn.v == packet.V5 {
		p.RawProps = m.props()
		if has {
			p.Props.MessageExpiry = packet.Some(secs)
		}
	}
	if cn.maxPacket > 0 && p.Size(cn.v) > int(cn.maxPacket) {
		br.tooLarge.Add(1)
		cn.forgot = br.q.forget(m) || cn.forgot
		return nil
	}
	cn.scratch = p.AppendTo(cn.scratch[:0], cn.v)
	if _, err := cn.w.Write(cn.scratch); err != nil {
		return err
	}
	if !m.dup {
		br.out.Add(1)
	}
	return nil
}

// flush writes what w holds, within a keep alive period: a remote that takes longer to
// read is taken for gone. wmu is held.
func (cn *conn) flush() error {
	cn.lastWrite = time.Now()
	if !cn.closing.Load() {
		_ = cn.nc.SetWriteDeadline(cn.lastWrite.Add(cn.keepAlive))
	}
	return cn.w.Flush()
}

// readLoop reads the remote's packets until the connection breaks; no packet for one
// and a half keep alive periods (a PINGRESP is due within one) means it is gone.
func (cn *conn) readLoop() error {
	br := cn.br
	r := packet.Reader{Version: cn.v}
	buf := make([]byte, 32<<10)
	var (
		pub  packet.Publish
		ack  packet.Ack
		sub  packet.Suback
		dis  packet.Disconnect
		acks []heldAck // the acknowledgements of one read
	)
	for {
		_ = cn.nc.SetReadDeadline(time.Now().Add(cn.keepAlive * 3 / 2))
		n, err := cn.nc.Read(buf)
		if n == 0 && err != nil {
			return err
		}
		r.Feed(buf[:n])
		answered, acked, staged := false, false, false
		acks = acks[:0]
		for {
			h, body, ok, err := r.Next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			switch h.Type {
			case packet.PUBLISH:
				if err := pub.Decode(h, body, cn.v); err != nil {
					return err
				}
				if pub.QoS == 0 {
					br.onRemote(&pub)
					break
				}
				a := cn.received(&pub)
				staged = staged || a.stage
				acks = append(acks, a)
			case packet.PUBREL:
				if err := ack.Decode(h, body, cn.v); err != nil {
					return err
				}
				acks = append(acks, cn.released(ack.PacketID))
			case packet.PUBACK, packet.PUBCOMP:
				if err := ack.Decode(h, body, cn.v); err != nil {
					return err
				}
				_, st := br.q.ack(ack.PacketID)
				acked = acked || st
				select {
				case br.wake <- struct{}{}:
				default:
				}
			case packet.PUBREC:
				if err := ack.Decode(h, body, cn.v); err != nil {
					return err
				}
				if ack.Code >= 0x80 {
					// A 5.0 refusal ends the exchange [MQTT-4.3.3-4]: as a PUBACK would.
					_, st := br.q.ack(ack.PacketID)
					acked = acked || st
					select {
					case br.wake <- struct{}{}:
					default:
					}
					break
				}
				br.q.received(ack.PacketID)
				// PUBREL even for an id not in flight: the remote holds it until then.
				if err := cn.writeAck(packet.PUBREL, ack.PacketID); err != nil {
					return err
				}
				answered = true
			case packet.SUBACK:
				if err := sub.Decode(h, body, cn.v); err != nil {
					return err
				}
				br.q.releaseSub(sub.PacketID)
				for i, code := range sub.Codes {
					if code >= 0x80 {
						br.log.Warn("bridge: remote refused a subscription", "index", i, "code", code.String())
					}
				}
			case packet.PINGRESP:
			case packet.DISCONNECT:
				_ = dis.Decode(h, body, cn.v)
				return fmt.Errorf("bridge: remote disconnected: %s", dis.Code)
			default:
				return fmt.Errorf("bridge: unexpected %s from the remote", h.Type)
			}
		}
		if acked {
			br.q.commit() // the acknowledged entries' deletion; nothing waits for it
		}
		if len(acks) > 0 {
			cn.holdAcks(acks, staged)
		}
		if answered || len(acks) > 0 {
			cn.wmu.Lock()
			_, werr := cn.writeAcks()
			if werr == nil {
				werr = cn.flush()
			}
			cn.wmu.Unlock()
			if werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// writeAck buffers an acknowledgement; readLoop flushes after the packets of one read.
func (cn *conn) writeAck(t packet.Type, id uint16) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	return cn.writeAckLocked(t, id)
}

// writeAckLocked is writeAck with wmu held.
func (cn *conn) writeAckLocked(t packet.Type, id uint16) error {
	a := packet.Ack{PacketType: t, PacketID: id}
	_, err := cn.w.Write(a.AppendTo(cn.scratch[:0], cn.v))
	return err
}
