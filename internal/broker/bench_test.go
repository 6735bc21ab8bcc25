package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// benchConn is a listener.Conn that counts what is written to it, so that the publish
// path can be measured without sockets.
type benchConn struct {
	last    []byte // the last write, for tests that read an answer
	written atomic.Int64
	value   any
	l       listener.Listener
}

func (c *benchConn) Write(b []byte) (int, error) {
	c.last = append(c.last[:0], b...)
	c.written.Add(int64(len(b)))
	return len(b), nil
}
func (c *benchConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	c.written.Add(int64(n))
	return n, nil
}
func (c *benchConn) WriteAfter(b []byte, held sync.Locker) (int, error) {
	held.Unlock()
	c.written.Add(int64(len(b)))
	return len(b), nil
}
func (c *benchConn) Close() error                 { return nil }
func (c *benchConn) Shutdown()                    {}
func (c *benchConn) SetIdleTimeout(time.Duration) {}
func (c *benchConn) Touch()                       {}
func (c *benchConn) Buffered() int                { return 0 }
func (c *benchConn) NotifyDrained()               {}
func (c *benchConn) RemoteAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *benchConn) LocalAddr() net.Addr          { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883} }
func (c *benchConn) Listener() *listener.Listener { return &c.l }
func (c *benchConn) Value() any                   { return c.value }
func (c *benchConn) SetValue(v any)               { c.value = v }
func (c *benchConn) TLS() *tls.ConnectionState    { return nil }

func benchBroker(tb testing.TB) *Broker {
	return benchBrokerStore(tb, nil)
}

// benchBrokerStore is benchBroker restored from st, if not nil.
func benchBrokerStore(tb testing.TB, st store.Store) *Broker {
	cfg := conf.Default()
	cfg.Listeners = nil
	cfg.SysInterval = new(conf.Duration)
	cfg.EnsureDefaults()
	b, err := New(Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	if st != nil {
		if err := b.Restore(st); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// connect opens a session over a benchConn and returns the conn.
func connect(tb testing.TB, b *Broker, id string, v packet.Version) *benchConn {
	c := &benchConn{}
	b.OnOpen(c)
	pkt := (&packet.Connect{Version: v, CleanStart: true, ClientID: []byte(id),
		Props: packet.Properties{ReceiveMaximum: packet.Some[uint16](65535)}}).AppendTo(nil, v)
	b.OnData(c, pkt)
	if c.written.Load() == 0 {
		tb.Fatalf("%s: no CONNACK", id)
	}
	return c
}

func subscribe(tb testing.TB, b *Broker, c *benchConn, filter string, qos byte, v packet.Version) {
	before := c.written.Load()
	pkt := (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: qos}}}).AppendTo(nil, v)
	b.OnData(c, pkt)
	if c.written.Load() == before {
		tb.Fatalf("no SUBACK")
	}
}

// BenchmarkPublishPath measures the whole path of one PUBLISH read from a connection:
// decode, match, merge, enqueue and encode for every subscriber, and the flush, with
// acknowledgements from the subscribers for QoS 1 so that windows stay open. Store=on runs
// the broker with a (memory) store: the subscribers are not persistent, so their path must
// cost what it costs without one.
func BenchmarkPublishPath(b *testing.B) {
	for _, withStore := range []bool{false, true} {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			for _, qos := range []byte{0, 1} {
				for _, subs := range []int{1, 10, 100} {
					benchPublishPath(b, withStore, v, qos, subs)
				}
			}
		}
	}
}

func benchPublishPath(b *testing.B, withStore bool, v packet.Version, qos byte, subs int) {
	name := fmt.Sprintf("V=%s/QoS=%d/Subs=%d/MsgSz=64b", v, qos, subs)
	if withStore {
		name = "Store=on/" + name
	}
	b.Run(name, func(b *testing.B) {
		var st store.Store
		if withStore {
			st = store.NewMemory()
			defer st.Close()
		}
		br := benchBrokerStore(b, st)
		pub := connect(b, br, "pub", v)
		subConns := make([]*benchConn, subs)
		for i := range subConns {
			subConns[i] = connect(b, br, fmt.Sprintf("sub-%d", i), v)
			subscribe(b, br, subConns[i], "bench/+/data", 1, v)
		}
		p := &packet.Publish{Topic: []byte("bench/x/data"), QoS: qos, PacketID: 1, Payload: make([]byte, 64)}
		raw := p.AppendTo(nil, v)
		// Every message is acknowledged before the next, so the subscriber's window
		// is empty each time and packet id 1 is the one it gets.
		ack := (&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}).AppendTo(nil, v)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			br.OnData(pub, raw)
			if qos == 1 {
				for _, c := range subConns {
					br.OnData(c, ack)
				}
			}
		}
		b.StopTimer()
		if in, _ := br.sessions.m["sub-0"].Pending(); in != 0 {
			b.Fatalf("%d messages unacknowledged", in)
		}
		if subConns[0].written.Load() < int64(b.N*64) {
			b.Fatalf("subscriber got %d bytes for %d messages", subConns[0].written.Load(), b.N)
		}
	})
}
