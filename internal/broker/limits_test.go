package broker

import (
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// limitsBroker is a broker whose limits come from set applied to the defaults.
func limitsBroker(t *testing.T, set func(*conf.Limits)) *Broker {
	t.Helper()
	b := benchBroker(t)
	cfg := b.live.cfg.Clone()
	set(&cfg.Limits)
	b.live.limits.Store(newLimits(cfg, new(atomic.Int64), nil))
	return b
}

// remoteConn is an authTestConn from another address than loopback.
type remoteConn struct {
	authTestConn
	addr net.Addr
}

func (c *remoteConn) RemoteAddr() net.Addr { return c.addr }

// TestMaxConnections: past limits.max_connections a new connection is closed at once; a
// closed one makes room again.
func TestMaxConnections(t *testing.T) {
	b := limitsBroker(t, func(l *conf.Limits) { l.MaxConnections = new(2) })
	var cs []*authTestConn
	for range 3 {
		c := &authTestConn{}
		b.OnOpen(c)
		cs = append(cs, c)
	}
	if cs[0].isClosed() || cs[1].isClosed() || !cs[2].isClosed() {
		t.Fatalf("closed: %v %v %v, want only the third", cs[0].isClosed(), cs[1].isClosed(), cs[2].isClosed())
	}
	b.OnClose(cs[2], nil) // a refused connection's close must not free a slot
	c := &authTestConn{}
	b.OnOpen(c)
	if !c.isClosed() {
		t.Fatal("a refused connection's close freed a slot")
	}
	b.OnClose(cs[0], nil)
	c = &authTestConn{}
	b.OnOpen(c)
	if c.isClosed() {
		t.Fatal("no room after a connection closed")
	}
}

// TestConnectRate: one source address gets its burst and then its rate; loopback and
// other sources are not affected.
func TestConnectRate(t *testing.T) {
	b := limitsBroker(t, func(l *conf.Limits) { l.ConnectRate, l.ConnectBurst = new(10), 3 })
	open := func(ip string) bool {
		c := &remoteConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 5000}}
		if !b.admitAccepted(nil, netip.MustParseAddr(ip)) { // as the listener asks, before the handshake
			return false
		}
		b.OnOpen(c)
		ok := !c.isClosed()
		if ok {
			b.OnClose(c, nil)
		}
		return ok
	}
	for i := range 3 {
		if !open("10.0.0.1") {
			t.Fatalf("connection %d of the burst refused", i)
		}
	}
	if open("10.0.0.1") {
		t.Fatal("a fourth connection at once passed a burst of 3")
	}
	if !open("10.0.0.2") || !open("127.0.0.1") || !open("::1") {
		t.Fatal("another source was limited")
	}
	// The bucket refills at the rate: 10/s is one token per 100ms.
	l := b.live.limits.Load().connect
	ip := netip.MustParseAddr("10.0.0.1")
	nowNs := time.Now().UnixNano()
	if !l.allow(ip, nowNs+int64(150*time.Millisecond)) {
		t.Fatal("no token after 150ms at 10/s")
	}
	if l.allow(ip, nowNs+int64(160*time.Millisecond)) {
		t.Fatal("a second token 10ms later")
	}
}

// TestConnectLimiterBounded: a flood from many addresses keeps the table bounded.
func TestConnectLimiterBounded(t *testing.T) {
	l := &connectLimiter{rate: 1, burst: 2, buckets: make(map[netip.Addr]bucket)}
	nowNs := time.Now().UnixNano()
	for i := range maxBuckets + 100 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		l.allow(ip, nowNs)
	}
	if len(l.buckets) > maxBuckets {
		t.Fatalf("%d buckets, cap %d", len(l.buckets), maxBuckets)
	}
}

// TestTopicAndSubscriptionLimits: filters beyond the length or level limits, and
// subscriptions beyond the per-session cap, fail in the SUBACK; a PUBLISH beyond them
// ends the connection with 0x90.
func TestTopicAndSubscriptionLimits(t *testing.T) {
	b := limitsBroker(t, func(l *conf.Limits) {
		l.MaxTopicLength, l.MaxTopicLevels, l.MaxSubscriptions = 20, 3, new(2)
	})
	v := packet.V5
	c := &authTestConn{}
	b.OnOpen(c)
	in := connectPacket(v, "c", "", "")
	in = (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
		{Filter: []byte(strings.Repeat("x", 21))}, // too long
		{Filter: []byte("a/b/c/d")},               // too deep
		{Filter: []byte("a/b/c")},
		{Filter: []byte("a/#")},
		{Filter: []byte("a/b/c")}, // a replacement fits
		{Filter: []byte("z")},     // a third does not
	}}).AppendTo(in, v)
	b.OnData(c, in)
	ps := c.waitPackets(t, v, 2)
	want := []packet.ReasonCode{packet.TopicFilterInvalid, packet.TopicFilterInvalid, 0, 0, 0, packet.QuotaExceeded}
	if got := ps[1].(*packet.Suback).Codes; !slicesEqual(got, want) {
		t.Fatalf("SUBACK %v, want %v", got, want)
	}
	b.OnData(c, (&packet.Publish{Topic: []byte("a/b/c/d"), Payload: []byte("x")}).AppendTo(nil, v))
	ps = c.waitPackets(t, v, 3)
	if d, ok := ps[2].(*packet.Disconnect); !ok || d.Code != packet.TopicNameInvalid {
		t.Fatalf("answer %v, want DISCONNECT 0x90", ps[2])
	}
}

// TestPublishRate: a client publishing past its burst is disconnected with 0x96.
func TestPublishRate(t *testing.T) {
	b := limitsBroker(t, func(l *conf.Limits) { l.PublishRate, l.PublishBurst = 1, 5 })
	v := packet.V5
	c := &authTestConn{}
	b.OnOpen(c)
	b.OnData(c, connectPacket(v, "c", "", ""))
	for range 5 {
		b.OnData(c, (&packet.Publish{Topic: []byte("t"), Payload: []byte("x")}).AppendTo(nil, v))
	}
	if ps := c.packets(t, v); len(ps) != 1 {
		t.Fatalf("answers %v within the burst", types(ps))
	}
	b.OnData(c, (&packet.Publish{Topic: []byte("t"), Payload: []byte("x")}).AppendTo(nil, v))
	ps := c.waitPackets(t, v, 2)
	if d, ok := ps[1].(*packet.Disconnect); !ok || d.Code != packet.MessageRateTooHigh {
		t.Fatalf("answer %v, want DISCONNECT 0x96", ps[1])
	}
}
