package interop

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/packet/packettest"
)

// raw is a client that speaks packets: it writes exactly the packets (or bytes) a test
// builds, encoded with bifrost's codec, and hands over every packet the broker sends, so
// that a test can check the wire byte for byte where Paho would hide it (acks it never
// sends, DUP flags, properties present or absent, the reason code of a DISCONNECT).
type raw struct {
	t    testing.TB
	conn net.Conn
	v    packet.Version
	in   chan packet.Packet
	done chan struct{} // closed when reading has ended
	err  error         // why reading ended; set before done is closed
}

// raw dials the broker in the mode's transport, to speak the mode's version.
func (e *env) raw(t testing.TB) *raw {
	t.Helper()
	return e.rawVersion(t, e.version)
}

// rawVersion dials the broker to speak protocol version v.
func (e *env) rawVersion(t testing.TB, v packet.Version) *raw {
	t.Helper()
	r := &raw{t: t, conn: e.dial(t), v: v, in: make(chan packet.Packet, 4096), done: make(chan struct{})}
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
	defer r.conn.Close()
	br := bufio.NewReader(r.conn)
	for {
		p, err := packettest.ReadPacket(br, r.v)
		if err != nil {
			r.err = err
			return
		}
		r.in <- p
	}
}

// send encodes p in the client's version and writes it.
func (r *raw) send(p packet.Packet) {
	r.t.Helper()
	r.sendBytes(p.AppendTo(nil, r.v))
}

// sendBytes writes b as it is.
func (r *raw) sendBytes(b []byte) {
	r.t.Helper()
	if _, err := r.conn.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// next returns the next packet from the broker, failing the test if the connection ends
// or nothing comes within testenv.Timeout.
func (r *raw) next() packet.Packet {
	r.t.Helper()
	select {
	case p := <-r.in:
		return p
	case <-r.done:
		select {
		case p := <-r.in:
			return p
		default:
		}
		r.t.Fatalf("connection ended while a packet was expected: %v", r.err)
	case <-timeout():
		r.t.Fatal("timed out waiting for a packet")
	}
	return nil
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
// packet id pid.
func (r *raw) expectAck(typ packet.Type, pid uint16) *packet.Ack {
	r.t.Helper()
	a := expect[*packet.Ack](r)
	if a.PacketType != typ || a.PacketID != pid {
		r.t.Fatalf("got %v for packet id %d, want %v for %d", a.PacketType, a.PacketID, typ, pid)
	}
	return a
}

// none fails the test if the broker sends a packet within quiet.
func (r *raw) none() {
	r.t.Helper()
	select {
	case p := <-r.in:
		r.t.Fatalf("unexpected %v %+v", p.Type(), p)
	case <-time.After(quiet):
	}
}

// closed waits for the broker to close the connection, failing the test if a packet comes
// first, and returns why reading ended: io.EOF for a graceful close.
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
		return r.err
	case <-timeout():
		r.t.Fatal("timed out waiting for the broker to close the connection")
	}
	return nil
}

// closedGracefully waits for the broker to close the connection with a graceful end of
// stream (FIN, or a WebSocket close frame), not a reset.
func (r *raw) closedGracefully() {
	r.t.Helper()
	if err := r.closed(); !errors.Is(err, io.EOF) {
		r.t.Fatalf("connection ended with %v, want a graceful close (EOF)", err)
	}
}

// disconnectedWith waits for a DISCONNECT with reason code rc (5.0), then for the
// connection to close gracefully, so the client has read the reason code.
func (r *raw) disconnectedWith(rc packet.ReasonCode) {
	r.t.Helper()
	d := expect[*packet.Disconnect](r)
	if d.Code != rc {
		r.t.Fatalf("DISCONNECT %#x (%v), want %#x (%v)", byte(d.Code), d.Code, byte(rc), rc)
	}
	r.closedGracefully()
}

// drop closes the connection without a DISCONNECT, as a network failure would.
func (r *raw) drop() {
	_ = r.conn.Close()
	<-r.done
}

// connect sends c (in the client's version) and returns the CONNACK, failing the test
// unless the broker accepts it.
func (r *raw) connect(c *packet.Connect) *packet.Connack {
	r.t.Helper()
	ack := r.tryConnect(c)
	if ack.Code != packet.Success {
		r.t.Fatalf("CONNACK %#x (%v), want success", byte(ack.Code), ack.Code)
	}
	return ack
}

// tryConnect sends c and returns the CONNACK, whatever its code.
func (r *raw) tryConnect(c *packet.Connect) *packet.Connack {
	r.t.Helper()
	if c.Version == 0 {
		c.Version = r.v
	}
	r.send(c)
	return expect[*packet.Connack](r)
}

// subscribe subscribes to filters at qos with packet id pid and the subscription
// identifier subID (5.0, 0 none), and waits for the SUBACK.
func (r *raw) subscribe(pid uint16, qos byte, subID uint32, filters ...string) *packet.Suback {
	r.t.Helper()
	s := &packet.Subscribe{PacketID: pid}
	for _, f := range filters {
		s.Subscriptions = append(s.Subscriptions, packet.Subscription{Filter: []byte(f), QoS: qos})
	}
	if subID != 0 {
		s.Props.SubscriptionIDs = []uint32{subID}
	}
	return r.subscribePacket(s)
}

// subscribePacket sends s and waits for its SUBACK, failing the test on a refusal.
func (r *raw) subscribePacket(s *packet.Subscribe) *packet.Suback {
	r.t.Helper()
	r.send(s)
	ack := expect[*packet.Suback](r)
	if ack.PacketID != s.PacketID {
		r.t.Fatalf("SUBACK for packet id %d, want %d", ack.PacketID, s.PacketID)
	}
	for i, c := range ack.Codes {
		if c.IsError() {
			r.t.Fatalf("subscription %q refused: %v", s.Subscriptions[i].Filter, c)
		}
	}
	return ack
}

// publish sends a PUBLISH and, for QoS 1 and 2, completes its flow.
func (r *raw) publish(pid uint16, qos byte, topic, payload string) {
	r.t.Helper()
	r.send(&packet.Publish{Topic: []byte(topic), Payload: []byte(payload), QoS: qos, PacketID: pid})
	switch qos {
	case 1:
		r.expectAck(packet.PUBACK, pid)
	case 2:
		r.expectAck(packet.PUBREC, pid)
		r.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: pid})
		r.expectAck(packet.PUBCOMP, pid)
	}
}

// expectPublish returns the next packet, failing the test unless it is a PUBLISH on
// topic with payload.
func (r *raw) expectPublish(topic, payload string) *packet.Publish {
	r.t.Helper()
	p := expect[*packet.Publish](r)
	if string(p.Topic) != topic || string(p.Payload) != payload {
		r.t.Fatalf("PUBLISH %q %q, want %q %q", p.Topic, p.Payload, topic, payload)
	}
	return p
}

// session connects as client id in the client's version, with a persistent session
// (clean session off in 3.1.1, clean start off and a five-minute expiry in 5.0) or a clean
// one, and returns the CONNACK. more, if not nil, adds to the CONNECT.
func (r *raw) session(id string, persist bool, more func(c *packet.Connect)) *packet.Connack {
	r.t.Helper()
	c := &packet.Connect{Version: r.v, ClientID: []byte(id), CleanStart: !persist, KeepAlive: 60}
	if persist && r.v == packet.V5 {
		c.Props.SessionExpiry = packet.Some[uint32](300)
	}
	if more != nil {
		more(c)
	}
	return r.connect(c)
}

// leave sends a normal DISCONNECT and waits until the broker has closed the connection, so
// that the broker has handled the DISCONNECT before the test goes on.
func (r *raw) leave() {
	r.t.Helper()
	r.send(&packet.Disconnect{})
	r.closed()
}
