package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// handshakeTimeout bounds the wait for each CONNACK and SUBACK.
const handshakeTimeout = 10 * time.Second

// A client is one raw MQTT connection: a TCP socket, the codec's stream reader and a read
// buffer. It speaks just enough MQTT for the load: CONNECT, SUBSCRIBE, PUBLISH and the
// acknowledgements, each encoded by internal/packet.
type client struct {
	wmu  sync.Mutex // serializes writes: a publisher's PUBLISHes and PUBRELs, DISCONNECT
	nc   net.Conn
	v    packet.Version
	rd   packet.Reader
	rbuf []byte
	// closing is set before this side sends DISCONNECT: an acknowledgement the reader
	// writes after it may make the broker, which closes on DISCONNECT, reset the
	// connection, and that is then the end of the stream, not an error.
	closing atomic.Bool
}

// dialer opens connections to one broker address from a rotating set of loopback source
// addresses, so that no single source address runs out of ephemeral ports.
type dialer struct {
	addr    string
	sources []netip.Addr // empty: let the kernel choose
	wsPath  string       // set: MQTT over WebSocket to ws://addr/wsPath (ws.go)
}

// newDialer returns a dialer using srcAddrs source addresses 127.0.0.2, 127.0.0.3, ...
// (none when srcAddrs is 0), over WebSocket if wsPath is set. The broker's address must
// itself be on loopback.
func newDialer(addr string, srcAddrs int, wsPath string) (*dialer, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("loadgen: broker address %q: want IP:port: %w", addr, err)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("loadgen: broker address %s is not on loopback: this tool loads local brokers only", addr)
	}
	if srcAddrs > 250 {
		return nil, fmt.Errorf("loadgen: %d source addresses, at most 250", srcAddrs)
	}
	if wsPath != "" && wsPath[0] != '/' {
		return nil, fmt.Errorf("loadgen: WebSocket path %q must start with /", wsPath)
	}
	d := &dialer{addr: addr, wsPath: wsPath}
	if ap.Addr().Is4() {
		for i := range srcAddrs {
			d.sources = append(d.sources, netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)}))
		}
	}
	return d, nil
}

// source returns the source address for the i-th connection.
func (d *dialer) source(i int) *net.TCPAddr {
	if len(d.sources) == 0 {
		return nil
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(d.sources[i%len(d.sources)], 0))
}

// dial connects the i-th connection, leaving the choice of its source port to connect,
// where the kernel knows the destination (see bindNoPort).
func (d *dialer) dial(ctx context.Context, i int) (net.Conn, error) {
	if d.wsPath != "" {
		return d.dialWS(ctx, i)
	}
	return d.dialTCP(ctx, i)
}

// dialTCP opens the i-th TCP connection.
func (d *dialer) dialTCP(ctx context.Context, i int) (net.Conn, error) {
	nd := net.Dialer{Timeout: handshakeTimeout, Control: bindNoPort}
	if src := d.source(i); src != nil {
		nd.LocalAddr = src
	}
	return nd.DialContext(ctx, "tcp", d.addr)
}

// connectOptions are the CONNECT fields a load connection sets.
type connectOptions struct {
	version   packet.Version
	clientID  string
	keepAlive uint16 // seconds; 0: none
	recvMax   uint16 // 5.0 Receive Maximum; 0: not sent (the spec's 65535)
	// expiry > 0 asks for a persistent session: clean start 0, and in 5.0 this Session
	// Expiry Interval (seconds).
	expiry uint32
}

// connect opens an MQTT session on nc (clean start unless o.expiry is set) and waits
// for a successful CONNACK.
func connect(nc net.Conn, o connectOptions) (*client, error) {
	c := &client{nc: nc, v: o.version, rbuf: make([]byte, 4096)}
	c.rd.Version = o.version
	cp := packet.Connect{Version: o.version, CleanStart: o.expiry == 0, KeepAlive: o.keepAlive, ClientID: []byte(o.clientID)}
	if o.version == packet.V5 && o.recvMax > 0 {
		cp.Props.ReceiveMaximum = packet.Some(o.recvMax)
	}
	if o.version == packet.V5 && o.expiry > 0 {
		cp.Props.SessionExpiry = packet.Some(o.expiry)
	}
	if err := c.handshake(cp.AppendTo(nil, o.version), packet.CONNACK); err != nil {
		return nil, err
	}
	return c, nil
}

// subscribe subscribes to one filter at qos and waits for a SUBACK granting it.
func (c *client) subscribe(filter string, qos byte) error {
	sp := packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: qos}}}
	return c.handshake(sp.AppendTo(nil, c.v), packet.SUBACK)
}

// handshake writes req and reads packets until the reply of type want, which it checks.
func (c *client) handshake(req []byte, want packet.Type) error {
	if err := c.nc.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return err
	}
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.nc.Write(req); err != nil {
		return err
	}
	for {
		h, body, err := c.next()
		if err != nil {
			return fmt.Errorf("loadgen: waiting for %s: %w", want, err)
		}
		if h.Type != want {
			continue // e.g. a PINGRESP
		}
		p, err := packet.Decode(h, body, c.v)
		if err != nil {
			return fmt.Errorf("loadgen: %s: %w", want, err)
		}
		switch p := p.(type) {
		case *packet.Connack:
			if p.Code.IsError() {
				return fmt.Errorf("loadgen: connection refused: %v", p.Code)
			}
		case *packet.Suback:
			for _, code := range p.Codes {
				if code.IsError() {
					return fmt.Errorf("loadgen: subscription refused: %v", code)
				}
			}
		}
		return nil
	}
}

// write writes b whole, never interleaved with another write.
func (c *client) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// next returns the next packet, reading from the socket as needed. The body is valid
// until the next call.
func (c *client) next() (packet.Header, []byte, error) {
	for {
		h, body, ok, err := c.rd.Next()
		if err != nil || ok {
			return h, body, err
		}
		if err := c.fill(); err != nil {
			return h, nil, err
		}
	}
}

// fill reads what the socket has into the read buffer and feeds it to the reader. Call it
// only once the reader has reported that it holds no complete packet.
func (c *client) fill() error {
	n, err := c.nc.Read(c.rbuf)
	if n > 0 {
		c.rd.Feed(c.rbuf[:n])
		return nil
	}
	if err == nil {
		err = errors.New("empty read")
	}
	return err
}

// disconnectPacket is DISCONNECT, normal disconnection, in every version: 5.0 lets the
// reason code and properties be left out when they are 0 and empty (spec 3.14.2.1).
var disconnectPacket = []byte{byte(packet.DISCONNECT) << 4, 0}

// close sends DISCONNECT, so that the broker drops the session without publishing a will,
// waits until the broker closes its side (until deadline), so that the broker, not this
// process, keeps the TIME_WAIT state and this side's ports stay free, and closes.
func (c *client) close(deadline time.Time) {
	c.closing.Store(true)
	c.rd.Release()
	if err := c.nc.SetDeadline(deadline); err == nil {
		if _, err := c.nc.Write(disconnectPacket); err == nil {
			for {
				if _, err := c.nc.Read(c.rbuf); err != nil {
					break
				}
			}
		}
	}
	c.nc.Close()
}

// endOfStream returns nil for the errors that mean the connection was closed, by the
// broker or by this process, and err otherwise.
func endOfStream(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ended is endOfStream, and also nil for a reset (or a write into a reset connection)
// once this side has sent DISCONNECT (see closing).
func (c *client) ended(err error) error {
	if c.closing.Load() && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return nil
	}
	return endOfStream(err)
}
