package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/pubsub"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// FuzzSession drives the broker's real connection handler (OnOpen, OnData, OnClose) with
// sequences of packets from one to three clients, through fake connections, and checks
// after every step what no input may break:
//
//   - the broker does not panic;
//   - everything it writes to a connection decodes with the packet codec, and is what a
//     server may send there: CONNACK first and once, nothing after a refusing CONNACK or
//     a DISCONNECT, DISCONNECT only in 5.0, no packet beyond the client's Maximum Packet
//     Size [MQTT-3.1.2-24], no topic alias beyond its Topic Alias Maximum [MQTT-3.1.2-26]
//     or unknown on the connection, no new PUBLISH reusing a packet id still in flight
//     [MQTT-2.2.1-3], no more QoS 1 and 2 messages in flight than the client's Receive
//     Maximum [MQTT-3.3.4-9];
//   - its bookkeeping agrees with itself: the connected-clients count is the number of
//     online sessions, each session is registered under its ID, the subscription count is
//     the sum of the sessions' subscriptions;
//   - once every connection has closed no session is online and only sessions with an
//     expiry remain; once the broker is closed no goroutine is left.
//
// The fuzz input is a small program (see fuzzOp): one byte picks the number of clients,
// then each step is an op byte (a client and a kind) and the kind's argument bytes. Packets
// are encoded with the codec, sometimes mutated or replaced by raw bytes, and delivered in
// chunks split where the input says, so partial reads are exercised. Steps run one at a
// time on the fuzzing goroutine, as the listener's contract allows (calls for one
// connection never overlap); the interleaving of clients comes from the input, which keeps
// every failure reproducible.
//
//	go test -run '^$' -fuzz '^FuzzSession$' -fuzztime 10m -parallel 1 ./internal/broker
func FuzzSession(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 4096 {
			return // long programs only slow the search down
		}
		runFuzzProgram(t, prog)
	})
}

// The kinds of fuzz step. Each takes the argument bytes its handler in step reads, in
// order; an input that runs out reads zeros. Append-only: the corpus depends on them.
const (
	fzConnect     = iota // flags, id, props: a CONNECT (on a new connection if none is open)
	fzPublish            // flags, topic, pid, length
	fzAck                // kind, pid, code: PUBACK, PUBREC, PUBREL or PUBCOMP
	fzSubscribe          // n, n filters, options, subscription id
	fzUnsubscribe        // n, n filters
	fzPing               //
	fzDisconnect         // sel
	fzAuth               //
	fzGarbage            // n, n raw bytes
	fzDeliver            // k, k-1 split points: deliver the pending bytes in k reads
	fzClose              // the client drops the connection (OnClose, EOF)
	fzSlow               // sel: the connection reports a backed-up socket, or not
	fzFinish             // OnClose for every connection the broker closed
	fzMutate             // pos, xor: flip bits in a pending byte
	fzDeliverAll         // deliver the pending bytes in one read
	fzEmbedded           // topic, qos: the embedding program publishes (Broker.Publish)
	fzKinds
)

// fuzzOp is the op byte of a step: the client in the low 2 bits (modulo the number of
// clients), the kind above.
func fuzzOp(client, kind int) byte { return byte(kind<<2 | client) }

var (
	fuzzIDs     = []string{"a", "b", "c", ""}
	fuzzTopics  = []string{"t", "t/a", "a/b/c", "$SYS/x", "$share/g/t", "x/+/y", "#", "", "s/\u00e9", "t/\x00"}
	fuzzFilters = []string{"#", "t", "t/+", "+/a", "$share/g/t", "$share/g/#", "$SYS/#", "a/#", "t/a", "a/b/c", "a/#/b", "+"}
	fuzzVersion = []packet.Version{packet.V311, packet.V5, packet.V5, packet.V31}
	fuzzListen  = &listener.Listener{}
)

// fuzzConfig is the broker's config for fuzzing: small limits, so that short programs
// reach them (receive maximum, topic aliases, queues, packet size).
func fuzzConfig() *conf.Config {
	c := conf.Default()
	c.MQTT.ReceiveMaximum = 3
	c.MQTT.TopicAliasMaximum = ptrTo(2)
	c.MQTT.MaxPacketSize = 512
	c.Queue.OnlineMessages = 2
	c.Queue.OfflineMessages = 4
	c.Queue.OfflineBytes = 2048
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

func ptrTo[T any](v T) *T { return &v }

// runFuzzProgram runs one program against a new broker and checks the invariants.
func runFuzzProgram(t *testing.T, prog []byte) {
	g0 := runtime.NumGoroutine()
	b, err := New(Options{Config: fuzzConfig(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := &fuzzHarness{t: t, b: b, in: prog}
	n := 1 + int(h.next())%3
	brokerFirst := h.next()&1 != 0
	for i := range n {
		h.clients = append(h.clients, &fuzzClient{idx: i})
	}
	h.tracing = os.Getenv("BIFROST_FUZZ_TRACE") != ""
	for steps := 0; h.pos < len(h.in) && steps < 256; steps++ {
		op := h.next()
		c, kind := h.clients[int(op&3)%n], int(op>>2)%fzKinds
		if h.tracing {
			h.trace(steps, c, kind)
		}
		h.step(c, kind)
		h.notices()
		if h.tracing {
			h.traceOut()
		}
		h.check("after step " + fmt.Sprint(steps))
	}

	// The end: every client goes (or the broker closes first and they go after, as the
	// listener delivers OnClose for each connection Server.Close closes).
	if brokerFirst {
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	for _, c := range h.conns {
		h.onClose(c, io.EOF)
	}
	h.check("after every connection closed")
	if b.Clients() != 0 {
		t.Fatalf("%d clients counted connected after every connection closed", b.Clients())
	}
	b.mu.Lock()
	for id, s := range b.sessions.m {
		if s.Online() {
			t.Errorf("session %q online after every connection closed", id)
		}
		if s.Expiry() == 0 {
			t.Errorf("session %q with expiry 0 outlived its connection", id)
		}
	}
	b.mu.Unlock()
	if !brokerFirst {
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	b.mu.Lock()
	timers := len(b.sessions.wills) + len(b.sessions.expiries)
	b.mu.Unlock()
	if timers != 0 {
		t.Errorf("%d will or expiry timers left after Close", timers)
	}
	// Goroutines of the broker left behind (a timer's callback running is one for a
	// moment). Others come and go in a fuzzing process: only the count is cheap, so the
	// stacks are read only when it is up.
	var stacks string
	defer func() {
		if t.Failed() && stacks != "" {
			t.Logf("the broker's goroutines:\n%s", stacks)
		}
	}()
	testenv.WaitFor(t, "the broker's goroutines to end after Close", func() bool {
		if runtime.NumGoroutine() <= g0 {
			return true
		}
		var left int
		left, stacks = fuzzBrokerGoroutines()
		return left == 0
	})
}

// fuzzBrokerGoroutines counts the goroutines running bifrost code other than the fuzz
// harness, and returns their stacks.
func fuzzBrokerGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	n, out := 0, ""
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, "bifrost-mqtt/bifrost/internal/") && !strings.Contains(g, "runFuzzProgram") {
			n++
			out += g + "\n\n"
		}
	}
	return n, out
}

// fuzzHarness holds one program's run.
type fuzzHarness struct {
	t       *testing.T
	b       *Broker
	in      []byte
	pos     int
	clients []*fuzzClient
	conns   []*fuzzConn // every connection opened, in order
	nconn   int
	tracing bool // BIFROST_FUZZ_TRACE: log the steps
}

func (h *fuzzHarness) next() byte {
	if h.pos >= len(h.in) {
		return 0
	}
	h.pos++
	return h.in[h.pos-1]
}

// fuzzClient is one client of the program: its current connection and the bytes it has
// built and not yet delivered.
type fuzzClient struct {
	idx     int
	conn    *fuzzConn
	v       packet.Version // the version its packets are encoded in
	pending []byte
}

// live reports whether c has a connection the listener would still deliver data on.
func (c *fuzzClient) live() bool { return c.conn != nil && !c.conn.gone() }

// step runs one step of kind for client c.
func (h *fuzzHarness) step(c *fuzzClient, kind int) {
	switch kind {
	case fzConnect:
		flags, id, props := h.next(), h.next(), h.next()
		if !c.live() {
			h.open(c)
		}
		c.v = fuzzVersion[flags&3]
		p := &packet.Connect{Version: c.v, ClientID: []byte(fuzzIDs[int(id)%len(fuzzIDs)]), CleanStart: flags&4 != 0,
			KeepAlive: 30}
		if flags&8 != 0 {
			p.WillFlag, p.WillTopic, p.WillPayload = true, []byte("t/will"), []byte("gone")
			p.WillQoS, p.WillRetain = flags>>4&3%3, flags&0x40 != 0
		}
		if flags&0x80 != 0 {
			p.UsernameFlag, p.Username, p.PasswordFlag, p.Password = true, []byte("u"), true, []byte("p")
		}
		if props&0x40 != 0 {
			p.KeepAlive = 0
		}
		if c.v == packet.V5 {
			switch props & 3 {
			case 1:
				p.Props.SessionExpiry = packet.Some[uint32](0)
			case 2:
				p.Props.SessionExpiry = packet.Some[uint32](10)
			case 3:
				p.Props.SessionExpiry = packet.Some(^uint32(0))
			}
			if props&4 != 0 {
				p.Props.ReceiveMaximum = packet.Some[uint16](2)
			}
			if props&8 != 0 {
				p.Props.MaximumPacketSize = packet.Some[uint32](64)
			}
			if props&0x10 != 0 {
				p.Props.TopicAliasMaximum = packet.Some[uint16](2)
			}
			if props&0x20 != 0 && p.WillFlag {
				p.WillProps.WillDelay = packet.Some[uint32](5)
			}
			if props&0x80 != 0 {
				p.Props.RequestProblemInfo = packet.Some[uint8](0)
			}
		}
		c.pending = p.AppendTo(c.pending, c.v)
	case fzPublish:
		flags, topic, pid, n := h.next(), h.next(), h.next(), h.next()
		p := &packet.Publish{Topic: []byte(fuzzTopics[int(topic)%len(fuzzTopics)]), QoS: flags & 3 % 3,
			Dup: flags&4 != 0, Retain: flags&8 != 0, Payload: make([]byte, n%64)}
		if p.QoS > 0 {
			p.PacketID = 1 + uint16(pid%4)
		} else {
			p.Dup = false
		}
		if c.v == packet.V5 {
			switch flags >> 4 & 3 {
			case 1:
				p.Props.TopicAlias = packet.Some[uint16](1)
			case 2:
				p.Topic, p.Props.TopicAlias = nil, packet.Some[uint16](1)
			case 3:
				p.Props.TopicAlias = packet.Some[uint16](3)
			}
			if flags&0x40 != 0 {
				p.Props.MessageExpiry = packet.Some[uint32](1)
			}
			if flags&0x80 != 0 {
				p.Props.PayloadFormat = packet.Some[uint8](1)
				p.Props.User = []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}
			}
		}
		c.pending = p.AppendTo(c.pending, c.v)
	case fzAck:
		kind, pid, code := h.next(), h.next(), h.next()
		a := &packet.Ack{PacketType: []packet.Type{packet.PUBACK, packet.PUBREC, packet.PUBREL, packet.PUBCOMP}[kind%4],
			PacketID: 1 + uint16(pid%4)}
		if kind&4 != 0 && c.conn != nil && c.conn.lastPID != 0 {
			a.PacketID = c.conn.lastPID // answer what the broker sent last: flows complete
		}
		if c.v == packet.V5 {
			a.Code = []packet.ReasonCode{packet.Success, packet.NoMatchingSubscribers, packet.UnspecifiedError,
				packet.PacketIdentifierNotFound}[code%4]
		}
		c.pending = a.AppendTo(c.pending, c.v)
	case fzSubscribe:
		n := 1 + int(h.next())%3
		s := &packet.Subscribe{PacketID: 1 + uint16(n)}
		for range n {
			s.Subscriptions = append(s.Subscriptions, packet.Subscription{Filter: []byte(fuzzFilters[int(h.next())%len(fuzzFilters)])})
		}
		opts, id := h.next(), h.next()
		for i := range s.Subscriptions {
			sub := &s.Subscriptions[i]
			sub.QoS, sub.NoLocal, sub.RetainAsPublished, sub.RetainHandling = opts&3%3, opts&4 != 0, opts&8 != 0, opts>>4&3%3
		}
		if id%5 != 0 {
			s.Props.SubscriptionIDs = []uint32{uint32(id % 5)}
		}
		c.pending = s.AppendTo(c.pending, c.v)
	case fzUnsubscribe:
		n := 1 + int(h.next())%3
		u := &packet.Unsubscribe{PacketID: 7}
		for range n {
			u.Filters = append(u.Filters, []byte(fuzzFilters[int(h.next())%len(fuzzFilters)]))
		}
		c.pending = u.AppendTo(c.pending, c.v)
	case fzPing:
		c.pending = packet.Pingreq{}.AppendTo(c.pending, c.v)
	case fzDisconnect:
		sel := h.next()
		d := &packet.Disconnect{Code: []packet.ReasonCode{packet.NormalDisconnection, packet.DisconnectWithWillMessage,
			packet.UnspecifiedError}[sel%3]}
		if sel&4 != 0 {
			d.Props.SessionExpiry = packet.Some[uint32](30)
		}
		c.pending = d.AppendTo(c.pending, c.v)
	case fzAuth:
		a := &packet.Auth{Code: packet.ContinueAuthentication}
		a.Props.AuthMethod = []byte("SCRAM-SHA-256")
		c.pending = a.AppendTo(c.pending, c.v)
	case fzGarbage:
		n := int(h.next()) % 16
		for range n {
			c.pending = append(c.pending, h.next())
		}
	case fzDeliver:
		k := 1 + int(h.next())%4
		for i := 1; i < k && len(c.pending) > 1; i++ {
			cut := 1 + int(h.next())%(len(c.pending)-1)
			h.deliver(c, c.pending[:cut])
			c.pending = c.pending[cut:]
		}
		h.deliver(c, c.pending)
		c.pending = nil
	case fzClose:
		if c.conn != nil {
			h.onClose(c.conn, io.EOF)
			c.conn = nil
		}
		c.pending = nil
	case fzSlow:
		if sel := h.next(); c.conn != nil {
			c.conn.setBuffered(int(sel&1) << 20)
		}
	case fzFinish:
		for _, fc := range h.conns {
			if fc.gone() {
				h.onClose(fc, nil)
			}
		}
	case fzMutate:
		pos, x := h.next(), h.next()
		if len(c.pending) > 0 {
			c.pending[len(c.pending)-1-int(pos)%len(c.pending)] ^= x
		}
	case fzDeliverAll:
		h.deliver(c, c.pending)
		c.pending = nil
	case fzEmbedded:
		topic, qos := h.next(), h.next()
		_ = h.b.Publish(fuzzTopics[int(topic)%len(fuzzTopics)], []byte("embedded"), qos%3, qos&4 != 0)
	}
}

// open gives c a new connection, as the listener does on accept.
func (h *fuzzHarness) open(c *fuzzClient) {
	h.nconn++
	fc := &fuzzConn{id: h.nconn}
	fc.w.mirror.MaxSize = int(h.b.live.set.Load().lim.MaxPacketSize)
	h.conns = append(h.conns, fc)
	c.conn = fc
	c.pending = nil
	h.b.OnOpen(fc)
}

// deliver hands data to the broker as one read on c's connection, unless the listener
// would not: no connection, or one the broker has shut down or closed.
func (h *fuzzHarness) deliver(c *fuzzClient, data []byte) {
	if len(data) == 0 || !c.live() {
		return
	}
	c.conn.sent(data) // what the client sent, for the checks of what comes back
	if h.tracing {
		h.t.Logf("  conn %d -> % x", c.conn.id, data)
	}
	h.b.OnData(c.conn, append([]byte(nil), data...))
}

// onClose delivers OnClose for fc, once.
func (h *fuzzHarness) onClose(fc *fuzzConn, err error) {
	if fc.onClosed {
		return
	}
	fc.onClosed = true
	h.b.OnClose(fc, err)
}

// check verifies the invariants of the package doc that hold at any moment.
func (h *fuzzHarness) check(when string) {
	t := h.t
	for _, fc := range h.conns {
		if err := fc.verify(); err != nil {
			t.Fatalf("%s: connection %d: %v\nwritten: % x", when, fc.id, err, fc.written())
		}
	}
	b := h.b
	b.mu.Lock()
	online := 0
	subs := 0
	for cid, s := range b.sessions.m {
		if s.Online() {
			online++
			// Queued messages wait only for the window or for a backed-up connection: on
			// a drained one they went out when its notice came (see notices).
			if fc, ok := s.Conn().(*fuzzConn); ok && fc.Buffered() == 0 && !fc.gone() && s.Waiting() {
				t.Fatalf("%s: session %q keeps messages queued beside room in its window on a drained connection", when, cid)
			}
		}
		subs += len(s.Subs())
		b.ids.mu.RLock()
		tg := b.lookup(pubsub.SubscriberID(s.ID()))
		b.ids.mu.RUnlock()
		if tg.s != s {
			t.Fatalf("%s: session %q (ID %d) is not registered under its ID", when, cid, s.ID())
		}
	}
	b.mu.Unlock()
	if got := b.Clients(); got != online {
		t.Fatalf("%s: %d clients counted connected, %d sessions online", when, got, online)
	}
	if got := b.stats.subs.Load(); got != int64(subs) {
		t.Fatalf("%s: subscription count %d, the sessions hold %d", when, got, subs)
	}
}

// notices delivers the drain notices that are due, as the listener does on its own
// goroutine once a connection's buffer empties (OnDrained may ask for another).
func (h *fuzzHarness) notices() {
	for more := true; more; {
		more = false
		for _, fc := range h.conns {
			if !fc.gone() && fc.drainedNotice() {
				h.b.OnDrained(fc)
				more = true
			}
		}
	}
}

// trace logs a step (BIFROST_FUZZ_TRACE=1), and traceOut what the broker wrote in it (BIFROST_FUZZ_TRACE=1), to read a
// failing program.
func (h *fuzzHarness) trace(step int, c *fuzzClient, kind int) {
	names := [...]string{"connect", "publish", "ack", "subscribe", "unsubscribe", "ping", "disconnect", "auth",
		"garbage", "deliver", "close", "slow", "finish", "mutate", "deliver-all", "embedded"}
	h.t.Logf("step %d: client %d %s", step, c.idx, names[kind])
}

// traceOut logs what the broker wrote since the last call.
func (h *fuzzHarness) traceOut() {
	for _, fc := range h.conns {
		fc.mu.Lock()
		out, v := fc.w.out[fc.traced:], fc.w.v
		if v == 0 {
			v = fc.w.mirror.Version
		}
		fc.traced = len(fc.w.out)
		fc.mu.Unlock()
		for len(out) > 0 {
			hd, n, err := packet.ParseHeader(out, v)
			if err != nil || n == 0 || hd.Size() > len(out) {
				break
			}
			p, _ := packet.Decode(hd, out[n:hd.Size()], max(v, packet.V311))
			h.t.Logf("  conn %d <- %s", fc.id, fuzzSummary(p))
			out = out[hd.Size():]
		}
	}
}

// fuzzSummary describes a packet in a line.
func fuzzSummary(p packet.Packet) string {
	switch p := p.(type) {
	case *packet.Connack:
		return fmt.Sprintf("CONNACK %v present=%v", p.Code, p.SessionPresent)
	case *packet.Publish:
		return fmt.Sprintf("PUBLISH %q qos=%d id=%d dup=%v retain=%v alias=%v", p.Topic, p.QoS, p.PacketID, p.Dup, p.Retain, p.Props.TopicAlias)
	case *packet.Ack:
		return fmt.Sprintf("%v id=%d %v", p.PacketType, p.PacketID, p.Code)
	case *packet.Suback:
		return fmt.Sprintf("SUBACK id=%d %v", p.PacketID, p.Codes)
	case *packet.Disconnect:
		return fmt.Sprintf("DISCONNECT %v", p.Code)
	case nil:
		return "(does not decode)"
	}
	return p.Type().String()
}

// fuzzConn is a listener.Conn that keeps what the broker writes and follows the contract:
// after Shutdown or Close, writes fail and no data is delivered.
type fuzzConn struct {
	mu       sync.Mutex
	id       int
	shut     bool // Shutdown called
	closed   bool // Close called
	buffered int  // what Buffered reports
	notice   bool // NotifyDrained was called: OnDrained is due once buffered is 0
	value    any
	w        fuzzWire
	lastPID  uint16 // the packet id of the broker's last PUBLISH or PUBREL
	onClosed bool   // OnClose delivered (by the harness)
	traced   int    // bytes of w.out traced
}

var _ listener.Conn = (*fuzzConn)(nil)

func (c *fuzzConn) Write(b []byte) (int, error) { return c.Writev([][]byte{b}) }

func (c *fuzzConn) WriteAfter(b []byte, held sync.Locker) (int, error) {
	c.mu.Lock()
	held.Unlock()
	defer c.mu.Unlock()
	if c.shut || c.closed {
		return 0, net.ErrClosed
	}
	c.w.out = append(c.w.out, b...)
	return len(b), nil
}

func (c *fuzzConn) Writev(bufs [][]byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shut || c.closed {
		return 0, net.ErrClosed
	}
	n := 0
	for _, b := range bufs {
		c.w.out = append(c.w.out, b...)
		n += len(b)
	}
	return n, nil
}

func (c *fuzzConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *fuzzConn) Shutdown() {
	c.mu.Lock()
	c.shut = true
	c.mu.Unlock()
}

func (c *fuzzConn) gone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shut || c.closed || c.onClosed
}

func (c *fuzzConn) setBuffered(n int) {
	c.mu.Lock()
	c.buffered = n
	c.mu.Unlock()
}

func (c *fuzzConn) sent(data []byte) {
	c.mu.Lock()
	c.w.sent(data)
	c.mu.Unlock()
}

func (c *fuzzConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.w.out...)
}

func (c *fuzzConn) SetIdleTimeout(time.Duration) {}
func (c *fuzzConn) Touch()                       {}
func (c *fuzzConn) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buffered
}
func (c *fuzzConn) NotifyDrained() {
	c.mu.Lock()
	c.notice = !c.shut && !c.closed
	c.mu.Unlock()
}

// drainedNotice reports, and forgets, a drain notice that is due: asked for, and nothing
// buffered.
func (c *fuzzConn) drainedNotice() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	due := c.notice && c.buffered == 0
	if due {
		c.notice = false
	}
	return due
}
func (c *fuzzConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000 + c.id}
}
func (c *fuzzConn) LocalAddr() net.Addr          { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1883} }
func (c *fuzzConn) Listener() *listener.Listener { return fuzzListen }
func (c *fuzzConn) Value() any                   { return c.value }
func (c *fuzzConn) SetValue(v any)               { c.value = v }
func (c *fuzzConn) TLS() *tls.ConnectionState    { return nil }

// verify decodes what the broker wrote since the last call and checks it.
func (c *fuzzConn) verify() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w.v == 0 {
		if cl, ok := c.value.(*client); ok && cl.r.Version != 0 {
			c.w.v = cl.r.Version // the version the broker accepted the CONNECT in
		}
	}
	pid, err := c.w.verify()
	if pid != 0 {
		c.lastPID = pid
	}
	clear(c.w.stepAcks)
	return err
}

// fuzzWire follows one connection from the client's side: what the client sent (decoded
// as the broker decodes it: its CONNECT and acknowledgements) and what the broker wrote.
type fuzzWire struct {
	out  []byte // written by the broker
	read int    // of out, verified

	// The client's side.
	mirror    packet.Reader // the client's bytes, decoded as the broker does
	mirrorOK  bool          // the mirror has seen the CONNECT and decodes on
	mirrorErr bool          // the mirror hit an error: the broker closes there
	v         packet.Version
	maxPacket uint32 // the client's Maximum Packet Size; 0: none
	aliasMax  uint16
	recvMax   uint16 // the client's Receive Maximum; 0: not checked

	// The broker's side.
	connack  bool
	final    string // why nothing more may come: a refusing CONNACK, a DISCONNECT
	aliases  map[uint16]bool
	inflight map[uint16]fuzzFlight
	// stepAcks are the packet ids the client acknowledged in this step's reads. The
	// broker handles a read's packets in order, so a PUBLISH it sent while handling the
	// read may have been acknowledged by a later packet of the same read: such a flight
	// is not tracked.
	stepAcks map[uint16]bool
}

// fuzzMinConnack bounds the CONNACKs the broker sends: with its properties (receive
// maximum, maximum packet size, topic alias maximum, the three "available" flags, an
// assigned client identifier) 22 to 49 bytes; 64 holds any of them.
const fuzzMinConnack = 64

// fuzzFlight is an outbound QoS 1 or 2 message the client has not completed.
type fuzzFlight struct {
	qos      byte
	released bool // PUBREC received, PUBREL sent
	resent   bool // sent again after a reconnect (DUP, or PUBREL)
}

// sent decodes the bytes the client sent, as the broker will: the CONNECT's version and
// limits, and the acknowledgements that complete outbound flows.
func (w *fuzzWire) sent(data []byte) {
	if w.mirrorErr {
		return
	}
	w.mirror.Feed(data)
	defer w.mirror.Hold() // data is the caller's
	for {
		h, body, ok, err := w.mirror.Next()
		if err != nil {
			w.mirrorErr = true
			return
		}
		if !ok {
			return
		}
		if !w.mirrorOK {
			var c packet.Connect
			if h.Type != packet.CONNECT || c.Decode(h, body, 0) != nil {
				w.mirrorErr = true
				return
			}
			w.mirrorOK = true
			w.mirror.Version = c.Version
			if c.Version == packet.V5 {
				w.maxPacket = c.Props.MaximumPacketSize.V
				w.aliasMax = c.Props.TopicAliasMaximum.V
				w.recvMax = c.Props.ReceiveMaximum.V
			}
			continue
		}
		var a packet.Ack
		switch h.Type {
		case packet.PUBACK, packet.PUBREC, packet.PUBCOMP:
			if a.Decode(h, body, w.mirror.Version) != nil {
				w.mirrorErr = true
				return
			}
			if w.stepAcks == nil {
				w.stepAcks = make(map[uint16]bool)
			}
			w.stepAcks[a.PacketID] = true
			f, ok := w.inflight[a.PacketID]
			switch {
			case !ok:
			case h.Type == packet.PUBACK && f.qos == 1,
				h.Type == packet.PUBREC && f.qos == 2 && !f.released && a.Code.IsError(),
				h.Type == packet.PUBCOMP && f.released:
				delete(w.inflight, a.PacketID)
			case h.Type == packet.PUBREC && f.qos == 2:
				f.released = true
				w.inflight[a.PacketID] = f
			}
		case packet.CONNECT:
			w.mirrorErr = true // a protocol error: the broker closes
			return
		default:
			if _, err := packet.Decode(h, body, w.mirror.Version); err != nil {
				w.mirrorErr = true
				return
			}
		}
	}
}

// verify checks the broker's bytes since the last call. It returns the packet id of the
// last PUBLISH or PUBREL among them, for acknowledgements that answer it.
func (w *fuzzWire) verify() (lastPID uint16, err error) {
	for w.read < len(w.out) {
		b := w.out[w.read:]
		h, n, err := packet.ParseHeader(b, w.v)
		if err != nil {
			return lastPID, fmt.Errorf("fixed header at byte %d: %w", w.read, err)
		}
		if n == 0 || h.Size() > len(b) {
			return lastPID, fmt.Errorf("a partial packet at byte %d: the broker writes whole packets", w.read)
		}
		v := w.v
		if v == 0 {
			if h.Type != packet.CONNACK {
				return lastPID, fmt.Errorf("%v before CONNACK", h.Type)
			}
			v = packet.V311 // a refusal before the version was accepted
			if h.Remaining > 2 {
				v = packet.V5
			}
		}
		p, err := packet.Decode(h, b[n:h.Size()], v)
		if err != nil {
			return lastPID, fmt.Errorf("%v at byte %d does not decode: %w", h.Type, w.read, err)
		}
		w.read += h.Size()
		if w.final != "" {
			return lastPID, fmt.Errorf("%v after %s", h.Type, w.final)
		}
		if w.maxPacket != 0 && uint32(h.Size()) > w.maxPacket {
			return lastPID, fmt.Errorf("%d-byte %v beyond the client's Maximum Packet Size %d [MQTT-3.1.2-24]", h.Size(), h.Type, w.maxPacket)
		}
		if !w.connack && h.Type != packet.CONNACK {
			if w.maxPacket != 0 && w.maxPacket < fuzzMinConnack {
				// The CONNACK did not fit: it must be shortened or the CONNECT refused.
				return lastPID, fmt.Errorf("%v before CONNACK to a client whose Maximum Packet Size %d is below a full CONNACK [MQTT-3.1.2-24]", h.Type, w.maxPacket)
			}
			return lastPID, fmt.Errorf("%v before CONNACK", h.Type)
		}
		switch p := p.(type) {
		case *packet.Connack:
			if w.connack {
				return lastPID, errors.New("a second CONNACK")
			}
			w.connack = true
			if p.Code.IsError() {
				w.final = "a refusing CONNACK"
			}
		case *packet.Disconnect:
			if v != packet.V5 {
				return lastPID, fmt.Errorf("DISCONNECT to a %v client", v)
			}
			w.final = "a DISCONNECT"
		case *packet.Publish:
			if err := w.publish(p); err != nil {
				return lastPID, err
			}
			if p.QoS > 0 {
				lastPID = p.PacketID
			}
		case *packet.Ack:
			if p.PacketType == packet.PUBREL && p.Code == packet.Success {
				lastPID = p.PacketID
				if _, ok := w.inflight[p.PacketID]; !ok && !w.stepAcks[p.PacketID] {
					// Not the answer to a PUBREC of this step: a resend after reconnect.
					if w.inflight == nil {
						w.inflight = make(map[uint16]fuzzFlight)
					}
					w.inflight[p.PacketID] = fuzzFlight{qos: 2, released: true, resent: true}
				}
			}
		case *packet.Suback, *packet.Unsuback, *packet.Pingresp, *packet.Auth:
		default:
			return lastPID, fmt.Errorf("%v: a packet only a client sends", h.Type)
		}
	}
	return lastPID, nil
}

// publish checks an outbound PUBLISH against the client's limits and the flows in flight.
func (w *fuzzWire) publish(p *packet.Publish) error {
	if a := p.Props.TopicAlias; a.Set {
		if a.V == 0 || a.V > w.aliasMax {
			return fmt.Errorf("topic alias %d beyond the client's Topic Alias Maximum %d [MQTT-3.1.2-26]", a.V, w.aliasMax)
		}
		if w.aliases == nil {
			w.aliases = make(map[uint16]bool)
		}
		if len(p.Topic) == 0 && !w.aliases[a.V] {
			return fmt.Errorf("topic alias %d used before it was set on this connection", a.V)
		}
		w.aliases[a.V] = true
	} else if len(p.Topic) == 0 {
		return errors.New("PUBLISH without a topic or alias")
	}
	if p.QoS == 0 {
		return nil
	}
	if _, busy := w.inflight[p.PacketID]; busy && !p.Dup {
		return fmt.Errorf("new PUBLISH with packet id %d, still in flight [MQTT-2.2.1-3]", p.PacketID)
	}
	if w.stepAcks[p.PacketID] {
		delete(w.inflight, p.PacketID) // perhaps acknowledged already: see stepAcks
		return nil
	}
	if w.inflight == nil {
		w.inflight = make(map[uint16]fuzzFlight)
	}
	w.inflight[p.PacketID] = fuzzFlight{qos: p.QoS, resent: p.Dup}
	if w.recvMax != 0 && len(w.inflight) > int(w.recvMax) {
		err := fmt.Errorf("%d QoS 1 and 2 messages in flight, beyond the client's Receive Maximum %d [MQTT-3.3.4-9]", len(w.inflight), w.recvMax)
		resent := 0
		for _, f := range w.inflight {
			if f.resent {
				resent++
			}
		}
		if resent > int(w.recvMax) {
			err = fmt.Errorf("%w: %d of them resent on reconnect, beyond the new connection's Receive Maximum", err, resent)
		}
		return err
	}
	return nil
}

// fuzzSeeds are meaningful programs: each a first byte (clients, close order) and steps.
func fuzzSeeds() [][]byte {
	type s = []byte
	prog := func(first byte, steps ...s) []byte {
		p := []byte{first, 0}
		for _, st := range steps {
			p = append(p, st...)
		}
		return p
	}
	op := func(client, kind int, args ...byte) s { return append(s{fuzzOp(client, kind)}, args...) }
	const (
		v311  = 0x00
		v5    = 0x01
		clean = 0x04
		will  = 0x08
	)
	all := func(c int) s { return op(c, fzDeliverAll) }
	// sub subscribes client c to the filters (indexes into fuzzFilters, 1 to 3).
	sub := func(c int, opts, id byte, filters ...byte) s {
		return append(append(op(c, fzSubscribe, byte(len(filters)-1)), filters...), opts, id)
	}
	return [][]byte{
		// connect, subscribe, publish QoS 2 to oneself, complete both flows
		prog(0,
			op(0, fzConnect, v5|clean, 0, 0), sub(0, 2, 0, 1), all(0),
			op(0, fzPublish, 2, 0, 0, 5), all(0),
			op(0, fzAck, 1|4, 0, 0), op(0, fzAck, 2, 0, 0), all(0),
			op(0, fzAck, 3|4, 0, 0), all(0), op(0, fzDisconnect, 0), all(0)),
		// two clients: a publisher and a subscriber, QoS 1 and 2, split reads
		prog(1,
			op(0, fzConnect, v5|clean, 0, 0x10), op(1, fzConnect, v311|clean, 1, 0),
			sub(0, 2, 1, 1, 2), all(0), all(1),
			op(1, fzPublish, 1, 0, 1, 10), op(1, fzPublish, 2, 1, 2, 3), op(1, fzDeliver, 2, 5, 9),
			op(1, fzAck, 2, 2, 0), all(1), op(0, fzAck, 0|4, 0, 0), all(0)),
		// takeover: the same client id twice, with a will
		prog(1,
			op(0, fzConnect, v5|will|0x10, 2, 2), all(0),
			op(1, fzConnect, v5, 2, 2), all(1), op(0, fzPing), all(0), op(0, fzFinish)),
		// a persistent session with QoS 1 messages queued while offline, then resumed
		prog(1,
			op(0, fzConnect, v5, 0, 2|4), sub(0, 1, 0, 1), all(0), op(0, fzClose),
			op(1, fzConnect, v311|clean, 1, 0), op(1, fzPublish, 1, 0, 0, 1), op(1, fzPublish, 1, 0, 1, 1),
			op(1, fzPublish, 1, 0, 2, 1), all(1),
			op(0, fzConnect, v5, 0, 2|4), all(0), op(0, fzAck, 4, 0, 0), all(0)),
		// a will with delay, the client reconnects before it; a will published on a protocol error
		prog(2,
			op(2, fzConnect, v5, 2, 0), sub(2, 0, 0, 0), all(2),
			op(0, fzConnect, v5|will, 0, 2|0x20), all(0), op(0, fzClose),
			op(0, fzConnect, v5, 0, 2), all(0),
			op(1, fzConnect, v311|will, 1, 0), all(1), op(1, fzGarbage, 2, 0xf0, 0), all(1), op(0, fzFinish)),
		// topic aliases both ways and a slow consumer shedding QoS 0
		prog(0,
			op(0, fzConnect, v5|clean, 0, 0x10|8), sub(0, 0, 0, 0), all(0),
			op(0, fzPublish, 0x10, 0, 0, 3), op(0, fzPublish, 0x20, 0, 0, 3), all(0),
			op(0, fzSlow, 1), op(0, fzPublish, 0, 0, 0, 60), all(0), op(0, fzSlow, 0), op(0, fzPublish, 0x30, 0, 0, 1), all(0)),
		// shared subscriptions and retained messages
		prog(1,
			op(0, fzConnect, v5|clean, 0, 0), op(1, fzConnect, v311|clean, 1, 0),
			sub(0, 1, 0, 4), sub(1, 1, 0, 4), all(0), all(1),
			op(0, fzPublish, 1|8, 0, 0, 2), op(0, fzPublish, 1, 0, 1, 2), all(0),
			op(1, fzClose), op(0, fzEmbedded, 0, 1), sub(0, 0, 0, 1), all(0)),
		// Regression seeds, found by fuzzing. A Maximum Packet Size of 3 (mutated), below
		// any CONNACK, then AUTH: the CONNACK is fitted or the CONNECT refused.
		[]byte("000000000000000007000$0700X0700700A\xa90\xc8_X77~C8"),
		// Three QoS 1 messages in flight to a 3.1.1 connection, resumed by a 5.0 one with
		// Receive Maximum 2: no more than two are resent at once.
		[]byte("10B000\f00108A000\x051000\x051000\x0510009B1078"),
		// receive maximum exceeded, a second CONNECT, garbage before CONNECT
		prog(2,
			op(0, fzConnect, v5|clean, 0, 0), op(0, fzPublish, 2, 0, 0, 1), op(0, fzPublish, 2, 0, 1, 1),
			op(0, fzPublish, 2, 0, 2, 1), op(0, fzPublish, 2, 0, 3, 1), all(0),
			op(1, fzConnect, v311|clean, 1, 0), op(1, fzConnect, v311|clean, 1, 0), all(1),
			op(2, fzGarbage, 3, 0x30, 1, 0), op(2, fzConnect, v5, 2, 0), all(2), op(0, fzFinish)),
	}
}
