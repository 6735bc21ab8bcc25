package broker

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// authTestConn is a listener.Conn that records what the broker writes, safe for the auth
// pool's goroutines, and parses it back into packets.
type authTestConn struct {
	mu     sync.Mutex
	out    []byte
	closed bool
	value  any
	l      listener.Listener
	tls    *tls.ConnectionState
	idle   time.Duration // the last SetIdleTimeout
	touch  int           // Touch calls
}

func (c *authTestConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, b...)
	return len(b), nil
}
func (c *authTestConn) WriteAfter(b []byte, held sync.Locker) (int, error) {
	c.mu.Lock()
	held.Unlock()
	defer c.mu.Unlock()
	c.out = append(c.out, b...)
	return len(b), nil
}
func (c *authTestConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		m, _ := c.Write(b)
		n += m
	}
	return n, nil
}
func (c *authTestConn) Close() error                   { c.mu.Lock(); c.closed = true; c.mu.Unlock(); return nil }
func (c *authTestConn) Shutdown()                      { _ = c.Close() }
func (c *authTestConn) SetIdleTimeout(d time.Duration) { c.mu.Lock(); c.idle = d; c.mu.Unlock() }
func (c *authTestConn) Touch()                         { c.mu.Lock(); c.touch++; c.mu.Unlock() }
func (c *authTestConn) Buffered() int                  { return 0 }
func (c *authTestConn) NotifyDrained()                 {}
func (c *authTestConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
}
func (c *authTestConn) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883}
}
func (c *authTestConn) Listener() *listener.Listener { return &c.l }
func (c *authTestConn) Value() any                   { return c.value }
func (c *authTestConn) SetValue(v any)               { c.value = v }
func (c *authTestConn) TLS() *tls.ConnectionState    { return c.tls }

func (c *authTestConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// packets parses everything written so far (version v) into packet types and the
// packets themselves.
func (c *authTestConn) packets(t *testing.T, v packet.Version) []packet.Packet {
	t.Helper()
	c.mu.Lock()
	data := append([]byte(nil), c.out...)
	c.mu.Unlock()
	r := packet.Reader{Version: v}
	r.Feed(data)
	var ps []packet.Packet
	for {
		h, body, ok, err := r.Next()
		if err != nil {
			t.Fatalf("the broker wrote a bad packet: %v", err)
		}
		if !ok {
			break
		}
		var p packet.Packet
		switch h.Type {
		case packet.CONNACK:
			p = &packet.Connack{}
		case packet.AUTH:
			p = &packet.Auth{}
		case packet.DISCONNECT:
			p = &packet.Disconnect{}
		case packet.SUBACK:
			p = &packet.Suback{}
		case packet.PUBLISH:
			p = &packet.Publish{}
		case packet.PUBACK, packet.PUBREC:
			p = &packet.Ack{}
		case packet.PINGRESP:
			p = packet.Pingresp{}
		default:
			t.Fatalf("unexpected %v", h.Type)
		}
		if err := p.Decode(h, body, v); err != nil {
			t.Fatalf("decode %v: %v", h.Type, err)
		}
		ps = append(ps, p)
	}
	if r.Pending() {
		t.Fatal("the broker wrote a partial packet")
	}
	return ps
}

// waitPackets polls until the conn has at least n packets.
func (c *authTestConn) waitPackets(t *testing.T, v packet.Version, n int) []packet.Packet {
	t.Helper()
	var ps []packet.Packet
	testenv.WaitFor(t, fmt.Sprintf("%d packets", n), func() bool {
		ps = c.packets(t, v)
		return len(ps) >= n
	})
	return ps
}

func types(ps []packet.Packet) []packet.Type {
	var ts []packet.Type
	for _, p := range ps {
		ts = append(ts, p.Type())
	}
	return ts
}

// gateAuth is an Authenticator that blocks until released, then admits "alice" with
// password "secret" under the identity "alice-id" and refuses everyone else.
type gateAuth struct {
	gate chan struct{}
	seen chan *auth.Request
}

func (g *gateAuth) Authenticate(r *auth.Request) (auth.Result, error) {
	g.seen <- r
	<-g.gate
	switch {
	case r.Username == "alice" && string(r.Password) == "secret":
		return auth.Result{Username: "alice-id"}, nil
	case r.Username == "mallory":
		return auth.Result{}, auth.ErrNotAuthorized
	default:
		return auth.Result{}, auth.ErrBadCredentials
	}
}

func authBroker(t *testing.T, sec Security) *Broker {
	t.Helper()
	b := benchBroker(t)
	b.realms.sec[0] = sec
	return b
}

func connectPacket(v packet.Version, id, user, pass string) []byte {
	c := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte(id)}
	if user != "" {
		c.UsernameFlag, c.Username = true, []byte(user)
	}
	if pass != "" {
		c.PasswordFlag, c.Password = true, []byte(pass)
	}
	return c.AppendTo(nil, v)
}

// TestAuthOffLoop: a slow authenticator runs off the event loop; what the client sends
// meanwhile (pipelined after CONNECT, and in later reads) is kept and handled in order
// once the CONNECT is accepted, under the identity the authenticator gave.
func TestAuthOffLoop(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			g := &gateAuth{gate: make(chan struct{}), seen: make(chan *auth.Request, 1)}
			b := authBroker(t, Security{Authenticator: g, Remote: true})
			c := &authTestConn{}
			b.OnOpen(c)
			in := connectPacket(v, "c1", "alice", "secret")
			in = (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("a/b"), QoS: 1}}}).AppendTo(in, v)
			b.OnData(c, in)
			req := <-g.seen // the authenticator runs while OnData has returned
			if req.ClientID != "c1" || req.Username != "alice" || !req.HasPassword || req.Remote == "" {
				t.Fatalf("request %+v", req)
			}
			b.OnData(c, (&packet.Publish{Topic: []byte("a/b"), QoS: 1, PacketID: 7, Payload: []byte("x")}).AppendTo(nil, v))
			b.OnData(c, packet.Pingreq{}.AppendTo(nil, v))
			if ps := c.packets(t, v); len(ps) != 0 {
				t.Fatalf("answered %v before the authenticator decided", types(ps))
			}
			close(g.gate)
			ps := c.waitPackets(t, v, 5)
			want := []packet.Type{packet.CONNACK, packet.SUBACK, packet.PUBLISH, packet.PUBACK, packet.PINGRESP}
			if got := types(ps); !slicesEqual(got, want) {
				t.Fatalf("answers %v, want %v", got, want)
			}
			if ca := ps[0].(*packet.Connack); ca.Code != packet.Success {
				t.Fatalf("CONNACK %v", ca.Code)
			}
			cl := c.Value().(*client)
			cl.mu.Lock()
			user := cl.s.Username()
			cl.mu.Unlock()
			if user != "alice-id" {
				t.Fatalf("session identity %q, want the authenticator's alice-id", user)
			}
		})
	}
}

// TestAuthRemoteWhenWanted: the client's address, a system call away, is asked for only
// when the Security says its authenticator wants it (an embedder's hook); the built-in
// ones decide without it.
func TestAuthRemoteWhenWanted(t *testing.T) {
	for _, want := range []bool{false, true} {
		g := &gateAuth{gate: make(chan struct{}), seen: make(chan *auth.Request, 1)}
		close(g.gate)
		b := authBroker(t, Security{Authenticator: g, Remote: want})
		c := &authTestConn{}
		b.OnOpen(c)
		b.OnData(c, connectPacket(packet.V5, "c1", "alice", "secret"))
		req := <-g.seen
		if got := req.Remote != ""; got != want {
			t.Errorf("Security.Remote %v: request's Remote %q", want, req.Remote)
		}
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAuthRefused: bad credentials and a client the authenticator refuses get their
// CONNACK codes in both versions, nothing they pipelined is handled, and no session stays.
func TestAuthRefused(t *testing.T) {
	cases := []struct {
		user string
		v    packet.Version
		want packet.ReasonCode
		v3   byte
	}{
		{"alice", packet.V5, packet.BadUserNameOrPassword, 0},
		{"alice", packet.V311, packet.BadUserNameOrPassword, 4},
		{"mallory", packet.V5, packet.NotAuthorized, 0},
		{"mallory", packet.V311, packet.NotAuthorized, 5},
	}
	for _, tc := range cases {
		t.Run(tc.user+"/"+tc.v.String(), func(t *testing.T) {
			g := &gateAuth{gate: make(chan struct{}), seen: make(chan *auth.Request, 1)}
			close(g.gate)
			b := authBroker(t, Security{Authenticator: g})
			c := &authTestConn{}
			b.OnOpen(c)
			in := connectPacket(tc.v, "c1", tc.user, "wrong")
			in = (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("#")}}}).AppendTo(in, tc.v)
			b.OnData(c, in)
			c.waitPackets(t, tc.v, 1)
			time.Sleep(10 * time.Millisecond) // let anything wrongly handled show
			ps := c.packets(t, tc.v)
			if len(ps) != 1 {
				t.Fatalf("answers %v, want one CONNACK", types(ps))
			}
			ca := ps[0].(*packet.Connack)
			if ca.Code != tc.want {
				t.Fatalf("CONNACK %v, want %v", ca.Code, tc.want)
			}
			if tc.v != packet.V5 {
				c.mu.Lock()
				rc := c.out[3]
				c.mu.Unlock()
				if rc != tc.v3 {
					t.Fatalf("3.1.1 return code %d, want %d", rc, tc.v3)
				}
			}
			if !c.isClosed() || b.Clients() != 0 || b.index.Len() != 0 {
				t.Fatalf("closed %v clients %d subscriptions %d", c.isClosed(), b.Clients(), b.index.Len())
			}
		})
	}
}

// TestAuthCloseWhilePending: a connection that closes while its CONNECT is being decided
// gets no session when the decision comes.
func TestAuthCloseWhilePending(t *testing.T) {
	g := &gateAuth{gate: make(chan struct{}), seen: make(chan *auth.Request, 1)}
	b := authBroker(t, Security{Authenticator: g})
	c := &authTestConn{}
	b.OnOpen(c)
	b.OnData(c, connectPacket(packet.V5, "c1", "alice", "secret"))
	<-g.seen
	b.OnClose(c, nil)
	close(g.gate)
	time.Sleep(20 * time.Millisecond)
	b.mu.Lock()
	n := len(b.sessions.m)
	b.mu.Unlock()
	if ps := c.packets(t, packet.V5); len(ps) != 0 || n != 0 || b.Clients() != 0 {
		t.Fatalf("after close: answers %v, sessions %d, clients %d", types(ps), n, b.Clients())
	}
}

// TestAuthHeldBytesBounded: a client that floods while its CONNECT is pending is closed.
func TestAuthHeldBytesBounded(t *testing.T) {
	g := &gateAuth{gate: make(chan struct{}), seen: make(chan *auth.Request, 1)}
	defer close(g.gate)
	b := authBroker(t, Security{Authenticator: g})
	c := &authTestConn{}
	b.OnOpen(c)
	b.OnData(c, connectPacket(packet.V5, "c1", "alice", "secret"))
	<-g.seen
	p := (&packet.Publish{Topic: []byte("t"), Payload: make([]byte, 16<<10)}).AppendTo(nil, packet.V5)
	for range maxHeldBytes/len(p) + 2 {
		b.OnData(c, p)
	}
	if !c.isClosed() {
		t.Fatal("a client flooding during authentication was not closed")
	}
	cl := c.Value().(*client)
	cl.mu.Lock()
	held := cl.r.Held()
	cl.mu.Unlock()
	if held != 0 {
		t.Fatalf("the reader still holds %d bytes", held)
	}
}

// challenge is an enhanced authentication method for tests: the server answers the
// client's first data with "nonce:<data>", and the client must send back "ok:<data>".
// The client "bob" passes; "eve" sends the wrong answer.
type challenge struct{ name string }

func (m challenge) Name() string { return m.name }
func (m challenge) Start(r *auth.Request) auth.Exchange {
	return &challengeEx{user: r.Username}
}

type challengeEx struct {
	user  string
	first string
	step  int
}

func (x *challengeEx) Step(in []byte) ([]byte, bool, auth.Result, error) {
	x.step++
	switch x.step {
	case 1:
		x.first = string(in)
		return []byte("nonce:" + x.first), false, auth.Result{}, nil
	case 2:
		if string(in) != "ok:"+x.first {
			return nil, false, auth.Result{}, auth.ErrNotAuthorized
		}
		return []byte("welcome"), true, auth.Result{Username: x.user}, nil
	}
	return nil, false, auth.Result{}, errors.New("too many steps")
}

func authPacket(code packet.ReasonCode, method, data string) []byte {
	a := packet.Auth{Code: code}
	a.Props.AuthMethod = []byte(method)
	a.Props.AuthData = []byte(data)
	return a.AppendTo(nil, packet.V5)
}

func enhancedConnect(user, method, data string) []byte {
	c := &packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("c-" + user),
		UsernameFlag: true, Username: []byte(user)}
	c.Props.AuthMethod = []byte(method)
	c.Props.AuthData = []byte(data)
	return c.AppendTo(nil, packet.V5)
}

// TestEnhancedAuth runs an AUTH exchange to its CONNACK, a failed one, an unknown method,
// and the protocol errors of the exchange.
func TestEnhancedAuth(t *testing.T) {
	sec := Security{Methods: []auth.Method{challenge{"TEST-CHALLENGE"}}}
	t.Run("success", func(t *testing.T) {
		b := authBroker(t, sec)
		c := &authTestConn{}
		b.OnOpen(c)
		b.OnData(c, enhancedConnect("bob", "TEST-CHALLENGE", "hi"))
		ps := c.waitPackets(t, packet.V5, 1)
		a, ok := ps[0].(*packet.Auth)
		if !ok || a.Code != packet.ContinueAuthentication || string(a.Props.AuthMethod) != "TEST-CHALLENGE" || string(a.Props.AuthData) != "nonce:hi" {
			t.Fatalf("first answer %+v, want AUTH 0x18 with the challenge", ps[0])
		}
		b.OnData(c, authPacket(packet.ContinueAuthentication, "TEST-CHALLENGE", "ok:hi"))
		ps = c.waitPackets(t, packet.V5, 2)
		ca, ok := ps[1].(*packet.Connack)
		if !ok || ca.Code != packet.Success || string(ca.Props.AuthMethod) != "TEST-CHALLENGE" || string(ca.Props.AuthData) != "welcome" {
			t.Fatalf("second answer %+v, want CONNACK with the method and its last data", ps[1])
		}
		if b.Clients() != 1 {
			t.Fatalf("clients %d", b.Clients())
		}

		// Re-authentication (spec 4.12.1): AUTH 0x19 with the same method.
		b.OnData(c, authPacket(packet.ReAuthenticate, "TEST-CHALLENGE", "again"))
		ps = c.waitPackets(t, packet.V5, 3)
		if a, ok := ps[2].(*packet.Auth); !ok || a.Code != packet.ContinueAuthentication || string(a.Props.AuthData) != "nonce:again" {
			t.Fatalf("re-authentication answer %+v", ps[2])
		}
		b.OnData(c, authPacket(packet.ContinueAuthentication, "TEST-CHALLENGE", "ok:again"))
		ps = c.waitPackets(t, packet.V5, 4)
		if a, ok := ps[3].(*packet.Auth); !ok || a.Code != packet.Success || string(a.Props.AuthData) != "welcome" {
			t.Fatalf("re-authentication result %+v, want AUTH 0x00", ps[3])
		}
		// A failed re-authentication ends the connection with DISCONNECT 0x87.
		b.OnData(c, authPacket(packet.ReAuthenticate, "TEST-CHALLENGE", "x"))
		c.waitPackets(t, packet.V5, 5)
		b.OnData(c, authPacket(packet.ContinueAuthentication, "TEST-CHALLENGE", "wrong"))
		ps = c.waitPackets(t, packet.V5, 6)
		if d, ok := ps[5].(*packet.Disconnect); !ok || d.Code != packet.NotAuthorized {
			t.Fatalf("failed re-authentication answer %+v, want DISCONNECT 0x87", ps[5])
		}
	})
	t.Run("wrong answer", func(t *testing.T) {
		b := authBroker(t, sec)
		c := &authTestConn{}
		b.OnOpen(c)
		b.OnData(c, enhancedConnect("eve", "TEST-CHALLENGE", "hi"))
		c.waitPackets(t, packet.V5, 1)
		b.OnData(c, authPacket(packet.ContinueAuthentication, "TEST-CHALLENGE", "ok:guess"))
		ps := c.waitPackets(t, packet.V5, 2)
		if ca, ok := ps[1].(*packet.Connack); !ok || ca.Code != packet.NotAuthorized {
			t.Fatalf("answer %+v, want CONNACK 0x87", ps[1])
		}
		if !c.isClosed() || b.Clients() != 0 {
			t.Fatal("refused client not closed")
		}
	})
	cases := []struct {
		name   string
		second []byte // sent after the broker's first AUTH; nil: none
		method string
		want   packet.ReasonCode
	}{
		{"unknown method", nil, "NOPE", packet.BadAuthenticationMethod},
		{"publish before CONNACK", (&packet.Publish{Topic: []byte("t")}).AppendTo(nil, packet.V5), "TEST-CHALLENGE", packet.ProtocolError},
		{"other method", authPacket(packet.ContinueAuthentication, "OTHER", "ok:hi"), "TEST-CHALLENGE", packet.ProtocolError},
		{"re-authenticate before CONNACK", authPacket(packet.ReAuthenticate, "TEST-CHALLENGE", "ok:hi"), "TEST-CHALLENGE", packet.ProtocolError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := authBroker(t, sec)
			c := &authTestConn{}
			b.OnOpen(c)
			b.OnData(c, enhancedConnect("bob", tc.method, "hi"))
			n := 1
			if tc.second != nil {
				c.waitPackets(t, packet.V5, 1)
				b.OnData(c, tc.second)
				n = 2
			}
			ps := c.waitPackets(t, packet.V5, n)
			if ca, ok := ps[n-1].(*packet.Connack); !ok || ca.Code != tc.want {
				t.Fatalf("answer %+v, want CONNACK %v", ps[n-1], tc.want)
			}
			if !c.isClosed() || b.Clients() != 0 {
				t.Fatal("refused client not closed")
			}
		})
	}
	t.Run("AUTH without a method", func(t *testing.T) {
		b := authBroker(t, sec)
		c := &authTestConn{}
		b.OnOpen(c)
		b.OnData(c, connectPacket(packet.V5, "plain", "", ""))
		b.OnData(c, authPacket(packet.ReAuthenticate, "TEST-CHALLENGE", ""))
		ps := c.waitPackets(t, packet.V5, 2)
		if d, ok := ps[1].(*packet.Disconnect); !ok || d.Code != packet.ProtocolError {
			t.Fatalf("answer %+v, want DISCONNECT 0x82", ps[1])
		}
	})
}

// topicACL is an Authorizer for tests: nobody writes under secret/, nobody subscribes
// under private/, nobody reads under hidden/; Covers says a filter is readable whole
// unless it could match hidden/.
type topicACL struct{}

func (topicACL) Allow(user, cid string, a auth.Access, topic string) bool {
	switch a {
	case auth.Write:
		return !strings.HasPrefix(topic, "secret/")
	case auth.Subscribe:
		return !strings.HasPrefix(topic, "private/")
	default:
		return !strings.HasPrefix(topic, "hidden/")
	}
}

func (topicACL) Covers(user, cid, filter string) bool {
	return !strings.HasPrefix(filter, "hidden/") && !strings.HasPrefix(filter, "#") && !strings.HasPrefix(filter, "+")
}

// TestACL: denied publishes are refused (v5 0x87) or acknowledged and dropped (3.1.1),
// denied subscriptions fail in the SUBACK, a wildcard subscription gets only the topics
// its subscriber may read (live and retained), and a will on a denied topic refuses the
// CONNECT.
func TestACL(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			b := authBroker(t, Security{Authorizer: topicACL{}})
			pub := &authTestConn{}
			b.OnOpen(pub)
			b.OnData(pub, connectPacket(v, "pub", "", ""))
			// A retained message the subscriber may not read, and one it may.
			b.OnData(pub, (&packet.Publish{Topic: []byte("hidden/r"), Retain: true, Payload: []byte("h")}).AppendTo(nil, v))
			b.OnData(pub, (&packet.Publish{Topic: []byte("open/r"), Retain: true, Payload: []byte("o")}).AppendTo(nil, v))

			sub := &authTestConn{}
			b.OnOpen(sub)
			in := connectPacket(v, "sub", "", "")
			in = (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
				{Filter: []byte("#"), QoS: 1}, {Filter: []byte("private/x"), QoS: 1}}}).AppendTo(in, v)
			b.OnData(sub, in)
			ps := sub.waitPackets(t, v, 3) // CONNACK, SUBACK, retained open/r
			sa := ps[1].(*packet.Suback)
			wantFail := packet.NotAuthorized
			if v != packet.V5 {
				wantFail = packet.UnspecifiedError // 0x80, the only 3.1.1 failure
			}
			if len(sa.Codes) != 2 || sa.Codes[0] != packet.GrantedQoS1 || sa.Codes[1] != wantFail {
				t.Fatalf("SUBACK %v", sa.Codes)
			}
			if p := ps[2].(*packet.Publish); string(p.Topic) != "open/r" {
				t.Fatalf("retained %q delivered, want only open/r", p.Topic)
			}

			// Denied publish.
			b.OnData(pub, (&packet.Publish{Topic: []byte("secret/x"), QoS: 1, PacketID: 5, Payload: []byte("s")}).AppendTo(nil, v))
			pps := pub.waitPackets(t, v, 2)
			ack := pps[1].(*packet.Ack)
			if want := map[bool]packet.ReasonCode{true: packet.NotAuthorized, false: packet.Success}[v == packet.V5]; ack.Code != want || ack.PacketID != 5 {
				t.Fatalf("PUBACK %v id %d, want %v", ack.Code, ack.PacketID, want)
			}
			// Hidden topics are not delivered through "#"; others are.
			b.OnData(pub, (&packet.Publish{Topic: []byte("hidden/x"), Payload: []byte("h")}).AppendTo(nil, v))
			b.OnData(pub, (&packet.Publish{Topic: []byte("open/x"), Payload: []byte("o")}).AppendTo(nil, v))
			sub.waitPackets(t, v, 4)
			time.Sleep(10 * time.Millisecond)
			ps = sub.packets(t, v)
			if len(ps) != 4 || string(ps[3].(*packet.Publish).Topic) != "open/x" {
				t.Fatalf("subscriber got %v", types(ps))
			}

			// A will the client could not publish.
			w := &authTestConn{}
			b.OnOpen(w)
			c := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte("w"), WillFlag: true,
				WillTopic: []byte("secret/will"), WillPayload: []byte("bye")}
			b.OnData(w, c.AppendTo(nil, v))
			ps = w.waitPackets(t, v, 1)
			if ca := ps[0].(*packet.Connack); ca.Code != packet.NotAuthorized {
				t.Fatalf("CONNACK %v for a denied will", ca.Code)
			}
		})
	}
}

// TestACLIdentityChange: a persistent session is not resumed under another identity: the
// CONNECT starts clean (Session Present 0), and the old session's subscriptions, whose
// reach was judged for the other identity, are gone with it.
func TestACLIdentityChange(t *testing.T) {
	b := authBroker(t, Security{Authorizer: userACL{}})
	v := packet.V311
	c1 := &authTestConn{}
	b.OnOpen(c1)
	in := (&packet.Connect{Version: v, ClientID: []byte("s"), UsernameFlag: true, Username: []byte("admin")}).AppendTo(nil, v)
	in = (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("x/#")}}}).AppendTo(in, v)
	b.OnData(c1, in)
	c1.waitPackets(t, v, 2)
	b.OnClose(c1, nil)

	c2 := &authTestConn{}
	b.OnOpen(c2)
	b.OnData(c2, (&packet.Connect{Version: v, ClientID: []byte("s"), UsernameFlag: true, Username: []byte("guest")}).AppendTo(nil, v))
	if ca := c2.waitPackets(t, v, 1)[0].(*packet.Connack); ca.Code != packet.Success || ca.SessionPresent {
		t.Fatalf("guest's CONNACK %v, session present %v; want a clean session", ca.Code, ca.SessionPresent)
	}
	pub := &authTestConn{}
	b.OnOpen(pub)
	b.OnData(pub, connectPacket(v, "pub", "", ""))
	b.OnData(pub, (&packet.Publish{Topic: []byte("x/admin"), Payload: []byte("a")}).AppendTo(nil, v))
	b.OnData(pub, (&packet.Publish{Topic: []byte("x/public"), Payload: []byte("p")}).AppendTo(nil, v))
	b.OnData(pub, (&packet.Publish{QoS: 1, PacketID: 1, Topic: []byte("x/public"), Payload: []byte("p")}).AppendTo(nil, v))
	pub.waitPackets(t, v, 2) // CONNACK, PUBACK: the publishes before it are routed
	if ps := c2.packets(t, v); len(ps) != 1 {
		t.Fatalf("guest got %v, want its CONNACK only", types(ps))
	}
}

// userACL lets only "admin" read x/admin; it says every filter is covered, so only the
// broker's distrust of a changed identity makes deliveries checked.
type userACL struct{}

func (userACL) Allow(user, cid string, a auth.Access, topic string) bool {
	return a != auth.Read || topic != "x/admin" || user == "admin"
}
func (userACL) Covers(user, cid, filter string) bool { return user == "admin" }

// TestCertIdentity: on a listener with use_identity_as_username the verified client
// certificate names the client, whatever CONNECT says; without one it is refused.
func TestCertIdentity(t *testing.T) {
	b := authBroker(t, Security{Authenticator: &gateAuth{}}) // would block: must not be asked
	b.live.set.Load().certIdentity[""] = true                // authTestConn's listener has no name
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "device-7"}, DNSNames: []string{"d7.example"}}
	c := &authTestConn{tls: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert},
		VerifiedChains: [][]*x509.Certificate{{cert}}}}
	b.OnOpen(c)
	b.OnData(c, connectPacket(packet.V311, "c", "someone-else", "pw"))
	ps := c.waitPackets(t, packet.V311, 1)
	if ca := ps[0].(*packet.Connack); ca.Code != packet.Success {
		t.Fatalf("CONNACK %v", ca.Code)
	}
	if u := c.Value().(*client).s.Username(); u != "device-7" {
		t.Fatalf("username %q, want the certificate's CN", u)
	}
	cert.Subject.CommonName = ""
	if u := certUsername(c.tls); u != "d7.example" {
		t.Fatalf("identity %q without CN, want the DNS name", u)
	}
	none := &authTestConn{}
	b.OnOpen(none)
	b.OnData(none, connectPacket(packet.V5, "n", "x", ""))
	ps = none.waitPackets(t, packet.V5, 1)
	if ca := ps[0].(*packet.Connack); ca.Code != packet.NotAuthorized {
		t.Fatalf("CONNACK %v without a certificate, want 0x87", ca.Code)
	}
}
