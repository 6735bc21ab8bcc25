package hostile

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/packet/packettest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// raw is the attacker: a plain socket that writes exactly the bytes a case builds (well-
// formed packets encoded with bifrost's codec, or anything else) and hands over every
// packet the broker sends, decoded with the same codec. A packet from the broker that
// does not decode fails the test: even a hostile client must get well-formed answers.
type raw struct {
	t    testing.TB
	conn net.Conn
	v    packet.Version
	in   chan packet.Packet
	done chan struct{} // closed when reading has ended
	err  error         // why reading ended; set before done is closed
	bad  error         // the broker sent something that does not decode
	// backlog holds packets read ahead (while waiting for a PUBREL); next returns them first.
	backlog []packet.Packet
}

// dial connects to the broker, to speak protocol version v.
func (e *env) dial(t testing.TB, v packet.Version) *raw {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, testenv.Timeout)
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, conn: c, v: v, in: make(chan packet.Packet, 4096), done: make(chan struct{})}
	go r.readLoop()
	t.Cleanup(func() {
		_ = r.conn.Close()
		<-r.done
	})
	return r
}

// readLoop decodes the packets the broker sends until the connection ends.
func (r *raw) readLoop() {
	defer close(r.done)
	br := bufio.NewReader(r.conn)
	for {
		p, err := packettest.ReadPacket(br, r.v)
		if err != nil {
			var pe *packet.Error
			var rc packet.ReasonCode
			if errors.As(err, &pe) || errors.As(err, &rc) {
				r.bad = err
			}
			r.err = err
			return
		}
		r.in <- p
	}
}

// write writes b as it is. The broker may have closed the connection already (that is
// often the point), so an error is returned, not fatal.
func (r *raw) write(b []byte) error {
	_ = r.conn.SetWriteDeadline(time.Now().Add(testenv.Timeout))
	_, err := r.conn.Write(b)
	return err
}

// send encodes p in the client's version and writes it, failing the test on error.
func (r *raw) send(p packet.Packet) {
	r.t.Helper()
	if err := r.write(p.AppendTo(nil, r.v)); err != nil {
		r.t.Fatalf("write %v: %v", p.Type(), err)
	}
}

// sendBytes writes b, failing the test on error.
func (r *raw) sendBytes(b []byte) {
	r.t.Helper()
	if err := r.write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// connect sends a CONNECT for client id (clean start, keep alive 60s) and returns the
// CONNACK, failing the test unless it accepts. more, if not nil, adds to the CONNECT.
func (r *raw) connect(id string, more func(c *packet.Connect)) *packet.Connack {
	r.t.Helper()
	c := &packet.Connect{Version: r.v, ClientID: []byte(id), CleanStart: true, KeepAlive: 60}
	if more != nil {
		more(c)
	}
	r.send(c)
	ack := expect[*packet.Connack](r)
	if ack.Code != packet.Success {
		r.t.Fatalf("CONNACK %#x (%v), want success", byte(ack.Code), ack.Code)
	}
	return ack
}

// next returns the next packet from the broker, failing the test if the connection ends
// or nothing comes within testenv.Timeout.
func (r *raw) next() packet.Packet {
	r.t.Helper()
	if len(r.backlog) > 0 {
		p := r.backlog[0]
		r.backlog = r.backlog[1:]
		return p
	}
	select {
	case p := <-r.in:
		return p
	case <-r.done:
		select {
		case p := <-r.in:
			return p
		default:
		}
		r.checkBad()
		r.t.Fatalf("connection ended while a packet was expected: %v", r.err)
	case <-time.After(testenv.Timeout):
		r.t.Fatal("timed out waiting for a packet")
	}
	return nil
}

// nextOrEnd returns the next packet from the broker, or nil once the connection has
// ended without one (a packet that came just before the close is returned first); it
// fails the test if neither happens within testenv.Timeout.
func (r *raw) nextOrEnd() packet.Packet {
	r.t.Helper()
	if len(r.backlog) > 0 {
		return r.next()
	}
	select {
	case p := <-r.in:
		return p
	case <-r.done:
		select {
		case p := <-r.in:
			return p
		default:
		}
		r.checkBad()
		if !isClose(r.err) {
			r.t.Fatalf("connection ended with %v, want a close", r.err)
		}
		return nil
	case <-time.After(testenv.Timeout):
		r.t.Fatal("timed out waiting for a packet or the close")
	}
	return nil
}

func (r *raw) checkBad() {
	r.t.Helper()
	if r.bad != nil {
		r.t.Fatalf("the broker sent a malformed packet: %v", r.bad)
	}
}

// expect returns the next packet, failing the test unless it is a T.
func expect[T packet.Packet](r *raw) T {
	r.t.Helper()
	p := r.next()
	v, ok := p.(T)
	if !ok {
		r.t.Fatalf("got %v %+v, want %T", p.Type(), p, v)
	}
	return v
}

// expectAck returns the next packet, failing the test unless it is an ack of type typ for
// packet id pid with reason code rc (5.0; 3.1.1 acks carry none).
func (r *raw) expectAck(typ packet.Type, pid uint16, rc packet.ReasonCode) *packet.Ack {
	r.t.Helper()
	a := expect[*packet.Ack](r)
	if a.PacketType != typ || a.PacketID != pid {
		r.t.Fatalf("got %v for packet id %d, want %v for %d", a.PacketType, a.PacketID, typ, pid)
	}
	if r.v == packet.V5 && a.Code != rc {
		r.t.Fatalf("%v code %#x (%v), want %#x (%v)", typ, byte(a.Code), a.Code, byte(rc), rc)
	}
	return a
}

// closed waits for the broker to close the connection, failing the test if a packet
// comes first or nothing happens within testenv.Timeout, and returns why reading ended.
func (r *raw) closed() error {
	r.t.Helper()
	select {
	case p := <-r.in:
		r.t.Fatalf("got %v %+v, want the connection closed", p.Type(), p)
	case <-r.done:
		select {
		case p := <-r.in:
			r.t.Fatalf("got %v %+v, want the connection closed", p.Type(), p)
		default:
		}
		r.checkBad()
		if !isClose(r.err) {
			r.t.Fatalf("connection ended with %v, want a close", r.err)
		}
		return r.err
	case <-time.After(testenv.Timeout):
		r.t.Fatal("timed out waiting for the broker to close the connection")
	}
	return nil
}

// isClose reports whether a read error is the peer closing: an end of stream, or a reset
// (the broker closes at once where it has nothing to say, and unread input turns that
// close into a reset).
func isClose(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// ended waits for the end the specification prescribes after a violation: in 5.0 a
// DISCONNECT with one of the reason codes rcs, then the close [MQTT-4.13.1-1]; before
// 5.0, where the server has no DISCONNECT, the close alone [MQTT-4.8.0-1].
func (r *raw) ended(rcs ...packet.ReasonCode) {
	r.t.Helper()
	if r.v == packet.V5 {
		d := expect[*packet.Disconnect](r)
		ok := false
		for _, rc := range rcs {
			ok = ok || d.Code == rc
		}
		if !ok {
			r.t.Fatalf("DISCONNECT %#x (%v), want one of %v", byte(d.Code), d.Code, rcs)
		}
	}
	r.closed()
}

// refused waits for the answer to a CONNECT the server must refuse: a CONNACK with one of
// the codes rcs then the close, or (allowed for a malformed CONNECT, spec 3.1.4 and 4.13)
// the close alone when mayClose.
func (r *raw) refused(mayClose bool, rcs ...packet.ReasonCode) {
	r.t.Helper()
	p := r.nextOrEnd()
	if p == nil {
		if !mayClose {
			r.t.Fatalf("connection closed without a CONNACK (want one of %v): %v", rcs, r.err)
		}
		return
	}
	ack, ok := p.(*packet.Connack)
	if !ok {
		r.t.Fatalf("got %v %+v, want a refusing CONNACK", p.Type(), p)
	}
	match := false
	for _, rc := range rcs {
		match = match || ack.Code == rc
	}
	if !match {
		r.t.Fatalf("CONNACK %#x (%v), want one of %v", byte(ack.Code), ack.Code, rcs)
	}
	r.closed()
}

// alive proves the connection is still served: a PINGREQ gets its PINGRESP
// [MQTT-3.12.4-1], after whatever the broker sent before it, which is returned.
func (r *raw) alive() []packet.Packet {
	r.t.Helper()
	r.send(packet.Pingreq{})
	var before []packet.Packet
	for {
		p := r.next()
		if p.Type() == packet.PINGRESP {
			return before
		}
		before = append(before, p)
	}
}

// none fails the test if the broker sends a packet within quiet.
func (r *raw) none() {
	r.t.Helper()
	if len(r.backlog) > 0 {
		r.t.Fatalf("unexpected %v %+v", r.backlog[0].Type(), r.backlog[0])
	}
	select {
	case p := <-r.in:
		r.t.Fatalf("unexpected %v %+v", p.Type(), p)
	case <-time.After(quiet):
	}
}

// subscribe subscribes to filters at qos and waits for a SUBACK that grants them all.
func (r *raw) subscribe(pid uint16, qos byte, filters ...string) {
	r.t.Helper()
	s := &packet.Subscribe{PacketID: pid}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, packet.Subscription{Filter: []byte(f), QoS: qos})
	}
	r.send(s)
	ack := expect[*packet.Suback](r)
	if ack.PacketID != pid || len(ack.Codes) != len(filters) {
		r.t.Fatalf("SUBACK %+v for %d filters with packet id %d", ack, len(filters), pid)
	}
	for i, c := range ack.Codes {
		if c.IsError() {
			r.t.Fatalf("subscription %.60q refused: %v", filters[i], c)
		}
	}
}

// fixed builds a packet from its first byte and body, with a correct remaining length.
func fixed(first byte, body []byte) []byte {
	b := []byte{first}
	n := len(body)
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			c |= 0x80
		}
		b = append(b, c)
		if n == 0 {
			break
		}
	}
	return append(b, body...)
}

// str encodes an MQTT string: a two-byte length and the bytes, whatever they are.
func str(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

// cat concatenates byte slices.
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// receive returns the next packet, failing the test unless it is a PUBLISH, and completes
// its QoS flow as a well-behaved subscriber would.
func (r *raw) receive() *packet.Publish {
	r.t.Helper()
	p := expect[*packet.Publish](r)
	switch p.QoS {
	case 1:
		r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID})
	case 2:
		// Further messages may come before the PUBREL: they wait in the backlog.
		r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: p.PacketID})
		var ahead []packet.Packet
		for {
			q := r.next()
			if a, ok := q.(*packet.Ack); ok && a.PacketType == packet.PUBREL && a.PacketID == p.PacketID {
				break
			}
			ahead = append(ahead, q)
		}
		r.backlog = append(ahead, r.backlog...)
		r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: p.PacketID})
	}
	return p
}

// receiveTopic receives the next PUBLISH and fails the test unless it is on topic with
// payload.
func (r *raw) receiveTopic(topic, payload string) *packet.Publish {
	r.t.Helper()
	p := r.receive()
	if string(p.Topic) != topic || string(p.Payload) != payload {
		r.t.Fatalf("PUBLISH %q %q, want %q %q", p.Topic, p.Payload, topic, payload)
	}
	return p
}

// publish sends a PUBLISH and completes its QoS flow; it returns the PUBACK or PUBREC.
func (r *raw) publish(pid uint16, qos byte, topic, payload string) *packet.Ack {
	r.t.Helper()
	r.send(&packet.Publish{Topic: []byte(topic), Payload: []byte(payload), QoS: qos, PacketID: pid})
	switch qos {
	case 1:
		return r.ackFor(packet.PUBACK, pid)
	case 2:
		a := r.ackFor(packet.PUBREC, pid)
		r.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: pid})
		r.expectAck(packet.PUBCOMP, pid, packet.Success)
		return a
	}
	return nil
}

// ackFor returns the next packet, failing the test unless it is an ack of type typ for
// packet id pid (any reason code).
func (r *raw) ackFor(typ packet.Type, pid uint16) *packet.Ack {
	r.t.Helper()
	a := expect[*packet.Ack](r)
	if a.PacketType != typ || a.PacketID != pid {
		r.t.Fatalf("got %v for packet id %d, want %v for %d", a.PacketType, a.PacketID, typ, pid)
	}
	return a
}
