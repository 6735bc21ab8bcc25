package mqtttest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/packet/packettest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// A Raw is an MQTT 5 client that writes packets and reads them one at a time, for tests
// that watch what a broker sends a connection (a takeover's DISCONNECT, a close).
type Raw struct {
	Conn net.Conn
	r    *bufio.Reader
}

// NewRaw makes a Raw of an open connection.
func NewRaw(c net.Conn) *Raw { return &Raw{Conn: c, r: bufio.NewReader(c)} }

// DialRaw opens a TCP connection to addr and closes it when the test ends.
func DialRaw(t testing.TB, addr string) *Raw {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return NewRaw(c)
}

// Buffered is how many bytes the client has read from the connection and not yet
// returned as packets.
func (c *Raw) Buffered() int { return c.r.Buffered() }

// Send writes p.
func (c *Raw) Send(p packet.Packet) error {
	_, err := c.Conn.Write(p.AppendTo(nil, packet.V5))
	return err
}

// Read returns the next packet, waiting up to d; io.EOF once the broker closed.
func (c *Raw) Read(d time.Duration) (packet.Packet, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(d))
	return packettest.ReadPacket(c.r, packet.V5)
}

// Connect sends p as a 5.0 CONNECT (keep alive 60 s unless set) and returns the CONNACK.
func (c *Raw) Connect(p *packet.Connect) (*packet.Connack, error) {
	p.Version = packet.V5
	if p.KeepAlive == 0 {
		p.KeepAlive = 60
	}
	if err := c.Send(p); err != nil {
		return nil, err
	}
	pk, err := c.Read(testenv.Timeout)
	if err != nil {
		return nil, err
	}
	if ack, ok := pk.(*packet.Connack); ok {
		return ack, nil
	}
	return nil, fmt.Errorf("%v, not CONNACK", pk.Type())
}

// Serving reports whether the broker at addr accepts a clean CONNECT of id, for a
// testenv.WaitFor until a node serves clients.
func Serving(addr, id string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	ack, err := NewRaw(c).Connect(&packet.Connect{CleanStart: true, ClientID: []byte(id)})
	return err == nil && ack.Code == packet.Success
}

// TakenOver reports whether p, err is DISCONNECT 0x8E (session taken over).
func TakenOver(p packet.Packet, err error) bool {
	d, ok := p.(*packet.Disconnect)
	return err == nil && ok && d.Code == packet.SessionTakenOver
}

// IsTimeout reports whether err is a read that ran out of time.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Expect sends p and returns the answer, failing the test unless it is a packet of type
// want that comes within testenv.Timeout.
func (c *Raw) Expect(t testing.TB, p packet.Packet, want packet.Type) packet.Packet {
	t.Helper()
	if err := c.Send(p); err != nil {
		t.Fatalf("%v: %v", p.Type(), err)
	}
	got, err := c.Read(testenv.Timeout)
	if err != nil || got.Type() != want {
		t.Fatalf("%v: answered %v, %v; want %v", p.Type(), got, err, want)
	}
	return got
}
