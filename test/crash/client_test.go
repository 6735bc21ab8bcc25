package crash

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// conn is a bare MQTT connection speaking bifrost's codec: the test decides every packet,
// so it knows exactly which acknowledgement it received before the broker died.
type conn struct {
	nc  net.Conn
	br  *bufio.Reader
	v   packet.Version
	wmu sync.Mutex
}

// dial connects and sends c, returning the connection and its CONNACK.
func dial(addr string, v packet.Version, c *packet.Connect) (*conn, *packet.Connack, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	cn := &conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), v: v}
	c.Version = v
	if err := cn.write(c); err != nil {
		nc.Close()
		return nil, nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := cn.read()
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("CONNACK: %w", err)
	}
	ack, ok := p.(*packet.Connack)
	if !ok || ack.Code != packet.Success {
		nc.Close()
		return nil, nil, fmt.Errorf("CONNECT refused: %v", p)
	}
	return cn, ack, nil
}

func (c *conn) write(p packet.Packet) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(p.AppendTo(nil, c.v))
	return err
}

// read returns the next packet from the broker.
func (c *conn) read() (packet.Packet, error) {
	hdr := make([]byte, 0, 5)
	for {
		b, err := c.br.ReadByte()
		if err != nil {
			if len(hdr) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		hdr = append(hdr, b)
		if len(hdr) > 1 && (b&0x80 == 0 || len(hdr) == 5) {
			break
		}
	}
	h, _, err := packet.ParseHeader(hdr, c.v)
	if err != nil {
		return nil, err
	}
	body := make([]byte, h.Size()-len(hdr))
	if _, err := io.ReadFull(c.br, body); err != nil {
		return nil, err
	}
	return packet.Decode(h, body, c.v)
}

func (c *conn) close() { _ = c.nc.Close() }

// persistentConnect is the CONNECT of a session that outlives its connections: clean
// session off (3.1.1), clean start off and a session that never expires (5.0).
func persistentConnect(id string, v packet.Version) *packet.Connect {
	c := &packet.Connect{ClientID: []byte(id), KeepAlive: 60}
	if v == packet.V5 {
		c.Props.SessionExpiry = packet.Some(^uint32(0))
		c.Props.ReceiveMaximum = packet.Some[uint16](256)
	}
	return c
}

// subscriber is a persistent session that receives as an MQTT receiver must: a QoS 2
// message is delivered when its PUBLISH first arrives and its packet id remembered until
// the PUBREL, across reconnects while the broker reports the session present (spec
// 4.3.3, method B), so that a PUBLISH resent with that id is acknowledged, not delivered
// again.
type subscriber struct {
	id  string
	v   packet.Version
	qos byte

	mu       sync.Mutex
	awaiting map[uint16]bool // QoS 2 packet ids awaiting PUBREL
	got      map[string]int  // deliveries by payload
	notPres  int             // reconnects that found no session
}

func newSubscriber(id string, v packet.Version, qos byte) *subscriber {
	return &subscriber{id: id, v: v, qos: qos, awaiting: map[uint16]bool{}, got: map[string]int{}}
}

// connect resumes the session; first, it subscribes (the session is new).
func (s *subscriber) connect(addr string, first bool) (*conn, error) {
	c, ack, err := dial(addr, s.v, persistentConnect(s.id, s.v))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if !ack.SessionPresent {
		s.awaiting = map[uint16]bool{} // the receiver's state goes with the session
		if !first {
			s.notPres++
		}
	}
	s.mu.Unlock()
	if first {
		sub := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
			{Filter: []byte("crash/q1/+"), QoS: s.qos}, {Filter: []byte("crash/q2/+"), QoS: s.qos}}}
		if err := c.write(sub); err != nil {
			c.close()
			return nil, err
		}
		p, err := c.read()
		if err != nil {
			c.close()
			return nil, err
		}
		if a, ok := p.(*packet.Suback); !ok || len(a.Codes) != 2 || a.Codes[0].IsError() || a.Codes[1].IsError() {
			c.close()
			return nil, fmt.Errorf("%s: SUBACK %v", s.id, p)
		}
	}
	return c, nil
}

// serve receives until the connection fails or stop returns true for a delivered payload.
func (s *subscriber) serve(c *conn, stop func(payload string) bool) error {
	for {
		p, err := c.read()
		if err != nil {
			return err
		}
		var reply packet.Packet
		var delivered string
		switch p := p.(type) {
		case *packet.Publish:
			switch p.QoS {
			case 0:
				delivered = string(p.Payload)
			case 1:
				delivered = string(p.Payload)
				reply = &packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID}
			case 2:
				s.mu.Lock()
				if !s.awaiting[p.PacketID] {
					s.awaiting[p.PacketID] = true
					delivered = string(p.Payload)
				}
				s.mu.Unlock()
				reply = &packet.Ack{PacketType: packet.PUBREC, PacketID: p.PacketID}
			}
		case *packet.Ack:
			if p.PacketType == packet.PUBREL {
				s.mu.Lock()
				delete(s.awaiting, p.PacketID)
				s.mu.Unlock()
				reply = &packet.Ack{PacketType: packet.PUBCOMP, PacketID: p.PacketID}
			}
		}
		if delivered != "" {
			s.mu.Lock()
			s.got[delivered]++
			s.mu.Unlock()
		}
		if reply != nil {
			if err := c.write(reply); err != nil {
				return err
			}
		}
		if delivered != "" && stop != nil && stop(delivered) {
			return nil
		}
	}
}

// count returns how often payload was delivered.
func (s *subscriber) count(payload string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[payload]
}
