package broker

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// storeBroker returns a broker without listeners restored from st, closed when the test
// ends (st is not: a test restarts by building another broker on the same store).
func storeBroker(t testing.TB, st store.Store, tune func(c *conf.Config)) *Broker {
	t.Helper()
	cfg := conf.Default()
	cfg.Listeners = nil
	cfg.SysInterval = new(conf.Duration)
	if tune != nil {
		tune(cfg)
	}
	cfg.EnsureDefaults()
	b, err := New(Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// recConn is a connection that records every byte the broker writes, from any goroutine
// (held acknowledgements are written by the store's committer). Buffered reports
// buffered, which a test sets to play a slow consumer; notice records a NotifyDrained.
type recConn struct {
	benchConn
	mu       sync.Mutex
	buf      []byte
	writes   int // calls of Write and WriteAfter
	shutdown atomic.Bool
	buffered atomic.Int64
	notice   atomic.Bool
	paused   atomic.Bool // PauseReads, until ResumeReads
}

func (c *recConn) PauseReads()  { c.paused.Store(true) }
func (c *recConn) ResumeReads() { c.paused.Store(false) }

func (c *recConn) Buffered() int  { return int(c.buffered.Load()) }
func (c *recConn) NotifyDrained() { c.notice.Store(true) }

func (c *recConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.buf = append(c.buf, b...)
	c.writes++
	c.mu.Unlock()
	return len(b), nil
}

func (c *recConn) WriteAfter(b []byte, held sync.Locker) (int, error) {
	c.mu.Lock()
	held.Unlock()
	c.buf = append(c.buf, b...)
	c.writes++
	c.mu.Unlock()
	return len(b), nil
}

func (c *recConn) Shutdown() { c.shutdown.Store(true) }

func (c *recConn) Close() error { c.shutdown.Store(true); return nil }

// writeCalls returns the number of writes so far.
func (c *recConn) writeCalls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// take returns and forgets what was written.
func (c *recConn) take() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	c.buf = nil
	return b
}

// tclient is a test client speaking packets to a broker through a recConn.
type tclient struct {
	t    testing.TB
	b    *Broker
	c    *recConn
	v    packet.Version
	seen []packet.Packet // decoded, not yet consumed
}

// openT opens a connection on b and sends the CONNECT of client id that more adjusts
// (nil: clean start); the CONNACK is the caller's to wait for.
func openT(t testing.TB, b *Broker, v packet.Version, id string, more func(c *packet.Connect)) *tclient {
	t.Helper()
	c := &tclient{t: t, b: b, c: &recConn{}, v: v}
	b.OnOpen(c.c)
	p := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte(id), KeepAlive: 60}
	if more != nil {
		more(p)
	}
	c.send(p)
	return c
}

// dialT connects client id with the CONNECT more adjusts (nil: clean start) and returns
// it with its CONNACK consumed.
func dialT(t testing.TB, b *Broker, v packet.Version, id string, more func(c *packet.Connect)) *tclient {
	t.Helper()
	c := openT(t, b, v, id, more)
	b.commitWait()
	ack, ok := c.next().(*packet.Connack)
	if !ok || ack.Code != packet.Success {
		t.Fatalf("%s: CONNACK %+v", id, ack)
	}
	return c
}

// persist makes a CONNECT persistent: clean start off, and in 5.0 an expiry of secs.
func persist(secs uint32) func(c *packet.Connect) {
	return func(c *packet.Connect) {
		c.CleanStart = false
		if c.Version == packet.V5 {
			c.Props.SessionExpiry = packet.Some(secs)
		}
	}
}

func (c *tclient) send(p packet.Packet) { c.b.OnData(c.c, p.AppendTo(nil, c.v)) }

// drop ends the connection as a network failure would.
func (c *tclient) drop() { c.b.OnClose(c.c, nil) }

// packets returns every packet received and not yet consumed, after letting the store
// report what is committed.
func (c *tclient) packets() []packet.Packet {
	c.t.Helper()
	c.b.commitWait()
	b := c.c.take()
	for len(b) > 0 {
		h, n, err := packet.ParseHeader(b, c.v)
		if err != nil || n == 0 || h.Size() > len(b) {
			c.t.Fatalf("bad bytes from the broker: % x (%v)", b, err)
		}
		p, err := packet.Decode(h, b[n:h.Size()], c.v)
		if err != nil {
			c.t.Fatalf("decode %v: %v", h.Type, err)
		}
		c.seen = append(c.seen, p)
		b = b[h.Size():]
	}
	out := c.seen
	c.seen = nil
	return out
}

// next consumes one packet, failing the test if there is none.
func (c *tclient) next() packet.Packet {
	c.t.Helper()
	if len(c.seen) == 0 {
		c.seen = c.packets()
	}
	if len(c.seen) == 0 {
		c.t.Fatal("no packet from the broker")
	}
	p := c.seen[0]
	c.seen = c.seen[1:]
	return p
}

// lines describes every packet received (see describeP) and consumes them.
func (c *tclient) lines() []string {
	c.t.Helper()
	var out []string
	for _, p := range c.packets() {
		out = append(out, describeP(p))
	}
	return out
}

func describeP(p packet.Packet) string {
	switch p := p.(type) {
	case *packet.Publish:
		s := fmt.Sprintf("PUBLISH %s q%d %q", p.Topic, p.QoS, p.Payload)
		if p.Dup {
			s += " dup"
		}
		return s
	case *packet.Ack:
		if p.Code != packet.Success {
			return fmt.Sprintf("%v %d rc=%#x", p.PacketType, p.PacketID, byte(p.Code))
		}
		return fmt.Sprintf("%v %d", p.PacketType, p.PacketID)
	case *packet.Disconnect:
		return fmt.Sprintf("DISCONNECT rc=%#x", byte(p.Code))
	}
	return p.Type().String()
}

func (c *tclient) publish(pid uint16, qos byte, retain bool, topic, payload string) {
	c.send(&packet.Publish{Topic: []byte(topic), Payload: []byte(payload), QoS: qos, PacketID: pid, Retain: retain})
}

func (c *tclient) subscribe(pid uint16, qos byte, filter string) {
	c.t.Helper()
	c.send(&packet.Subscribe{PacketID: pid, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: qos}}})
	if _, ok := c.next().(*packet.Suback); !ok {
		c.t.Fatal("no SUBACK")
	}
}

func (c *tclient) ack(typ packet.Type, pid uint16) {
	c.send(&packet.Ack{PacketType: typ, PacketID: pid})
}

// equalLines fails the test unless got equals want.
func equalLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// dump is what a store holds, as Load gives it (Load also sweeps).
type dump struct {
	sessions map[string]store.SessionRecord
	queued   map[string][]store.QueuedRecord
	inbound  map[string][]uint16
	wills    map[string]store.WillRecord
	messages map[uint64]string // payloads
	retained map[string]uint64
}

func loadDump(t testing.TB, st store.Store) *dump {
	t.Helper()
	d := &dump{sessions: map[string]store.SessionRecord{}, queued: map[string][]store.QueuedRecord{},
		inbound: map[string][]uint16{}, wills: map[string]store.WillRecord{}, messages: map[uint64]string{},
		retained: map[string]uint64{}}
	if err := st.Load(d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *dump) Message(id uint64, r store.MessageRecord) error {
	d.messages[id] = string(r.Payload)
	return nil
}

func (d *dump) Session(r store.SessionRecord) error { d.sessions[r.ClientID] = r; return nil }

func (d *dump) Queued(cid string, _ uint64, r store.QueuedRecord) error {
	r.SubIDs = nil
	d.queued[cid] = append(d.queued[cid], r)
	return nil
}

func (d *dump) Inbound(cid string, pid uint16) error {
	d.inbound[cid] = append(d.inbound[cid], pid)
	return nil
}

func (d *dump) Will(cid string, r store.WillRecord) error {
	r.Topic, r.Payload, r.Props = bytes.Clone(r.Topic), bytes.Clone(r.Payload), nil
	d.wills[cid] = r
	return nil
}

func (d *dump) Retained(topic string, id uint64) error { d.retained[topic] = id; return nil }

// gateStore holds commits back between shut and open, to see what waits for the store.
type gateStore struct {
	store.Store
	mu      sync.Mutex
	shut    bool
	pending []func()
}

// close makes the gate hold commits back until open.
func (g *gateStore) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
}

func (g *gateStore) Commit(b *store.Batch, done func(error)) {
	g.mu.Lock()
	if g.shut {
		g.pending = append(g.pending, func() { g.Store.Commit(b, done) })
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.Store.Commit(b, done)
}

// open lets held commits through, and every later one.
func (g *gateStore) open() {
	g.mu.Lock()
	g.shut = false
	p := g.pending
	g.pending = nil
	g.mu.Unlock()
	for _, f := range p {
		f()
	}
}

// faultStore fails commits while fail holds an error: the batch is not applied and done
// gets the error, in commit order (an empty batch goes through the real store instead).
type faultStore struct {
	store.Store
	fail atomic.Pointer[error]
}

func (f *faultStore) Commit(b *store.Batch, done func(error)) {
	if p := f.fail.Load(); p != nil {
		err := *p
		f.Store.Commit(new(store.Batch), func(error) { done(err) })
		return
	}
	f.Store.Commit(b, done)
}

func (f *faultStore) set(err error) {
	if err == nil {
		f.fail.Store(nil)
		return
	}
	f.fail.Store(&err)
}
