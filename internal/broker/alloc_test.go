package broker

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/invariants"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestPublishPathAllocs checks that the broker's whole publish path allocates nothing,
// as BenchmarkPublishPath drives it over in-memory connections: a PUBLISH read from the
// publisher's connection is decoded, matched, merged, encoded for each of three
// subscribers and flushed; at QoS 1 the publisher's PUBACK goes out and the subscribers'
// PUBACKs are read, which recycles the message (msgpool.go). With the store on, what
// persistent subscribers keep is committed to Pebble (its batch reused) and the held
// PUBACK released; each step waits for the store, so that the committer's work falls
// inside the step it belongs to.
func TestPublishPathAllocs(t *testing.T) {
	if testenv.Race {
		t.Skip("sync.Pool drops items at random under the race detector: allocation counts mean nothing")
	}
	if invariants.Enabled {
		t.Skip("built with invariants, released messages stay out of the pools")
	}
	for _, sc := range []struct {
		name       string
		pebble     bool // a Pebble store in a temporary directory
		persistent bool // the subscribers' sessions outlive their connections
		shared     bool // one subscriber, in a shared subscription group
		// queue.when_full: backpressure, the queues never full: every delivery carries
		// its publisher as a Holder, which costs nothing until a queue is full.
		backpressure bool
		// A node of a cluster whose one peer routes the topic: the message is forwarded
		// (a fake cluster keeps Forward's done), and at QoS 1 the PUBACK waits for the
		// peer's acknowledgement in a pooled hold.
		peer bool
	}{
		{name: "Store=off"},
		// The store is on but no subscriber is persistent: nothing reaches it, and the
		// path must cost what it costs without one.
		{name: "Store=on/Subs=clean", pebble: true},
		// QoS 1 messages are stored until every subscriber acknowledged them (QoS 0
		// never reaches the store).
		{name: "Store=on/Subs=persistent", pebble: true, persistent: true},
		// A group member gets the message through deliverShared, which needs the
		// message's one pooled copy as a direct subscriber does.
		{name: "Store=off/Subs=shared", shared: true},
		{name: "Store=off/Queue=backpressure", backpressure: true},
		{name: "Store=off/Cluster=peer", peer: true},
	} {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			for _, qos := range []byte{0, 1} {
				t.Run(fmt.Sprintf("%s/V=%s/QoS=%d", sc.name, v, qos), func(t *testing.T) {
					p := newPathHarness(t, sc.pebble, sc.persistent, sc.shared, v, qos)
					if sc.backpressure {
						l := *p.br.live.limits.Load()
						l.backpressure = true
						p.br.live.limits.Store(&l)
					}
					if sc.peer {
						p.peer = &forwardPeers{fakeNode: &fakeNode{c: newFakeCluster(), name: "a", serving: true}, peers: 1}
						p.br.cluster = p.peer // after the CONNECTs: they would claim their client ids
					}
					runs := 1000
					if sc.persistent {
						runs = 200 // two fsyncs per message
					}
					got := allocsPerOp(runs, p.op)
					p.check(t, runs)
					if sc.persistent && qos == 1 {
						// Pebble's own background work (a memtable and a WAL file per
						// rotation) allocates too, far less than once per message: only
						// whole allocations per message are the path's.
						got = float64(int(got))
					}
					if got != 0 {
						t.Errorf("%.3f allocations per message, want 0", got)
					}
				})
			}
		}
	}
}

// allocsPerOp returns the allocations of runs calls of op, per call, after one warm-up
// call. Unlike testing.AllocsPerRun it does not round down, so an allocation every few
// calls shows; the process-wide count also sees the runtime's own rare allocations (more of them the longer a
// loaded machine stretches each measurement), so the fewest of five measurements is
// taken: an allocation of op's shows in all five.
func allocsPerOp(runs int, op func()) float64 {
	op()
	var ms runtime.MemStats
	fewest := ^uint64(0)
	for range 5 {
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		for range runs {
			op()
		}
		runtime.ReadMemStats(&ms)
		fewest = min(fewest, ms.Mallocs-before)
	}
	return float64(fewest) / float64(runs)
}

// pathHarness is a broker with a publisher and three subscribers to bench/+/data at QoS 1
// (or one to $share/g/bench/+/data) on benchConn connections.
type pathHarness struct {
	br         *Broker
	pub        *benchConn
	subs       []*benchConn
	qos        byte
	persistent bool
	peer       *forwardPeers // nil: a single node
	publish    []byte        // a 64-byte PUBLISH to bench/x/data, packet id 1
	ack        []byte        // a subscriber's PUBACK of packet id 1
}

func newPathHarness(t *testing.T, pebble, persistent, shared bool, v packet.Version, qos byte) *pathHarness {
	var st store.Store
	if pebble {
		cfg := conf.Default().Store
		cfg.Dir = t.TempDir()
		var err error
		if st, err = store.Open(cfg, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	p := &pathHarness{br: benchBrokerStore(t, st), qos: qos, persistent: persistent,
		publish: (&packet.Publish{Topic: []byte("bench/x/data"), QoS: qos, PacketID: 1, Payload: make([]byte, 64)}).AppendTo(nil, v),
		ack:     (&packet.Ack{PacketType: packet.PUBACK, PacketID: 1}).AppendTo(nil, v)}
	p.pub = connect(t, p.br, "pub", v)
	subs, filter := 3, "bench/+/data"
	if shared {
		subs, filter = 1, "$share/g/bench/+/data"
	}
	for i := range subs {
		c := &benchConn{}
		p.br.OnOpen(c)
		cp := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte(fmt.Sprint("sub-", i)),
			Props: packet.Properties{ReceiveMaximum: packet.Some[uint16](65535)}}
		if persistent {
			persist(3600)(cp)
		}
		p.br.OnData(c, cp.AppendTo(nil, v))
		// A persistent subscription's SUBACK waits for the store.
		p.br.OnData(c, (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}}).AppendTo(nil, v))
		p.br.commitWait()
		if c.written.Load() < 2+5 {
			t.Fatalf("sub-%d: no CONNACK and SUBACK", i)
		}
		p.subs = append(p.subs, c)
	}
	if persistent && qos == 1 {
		// The path under test reaches the store: the message is stored until acknowledged.
		p.br.OnData(p.pub, p.publish)
		p.br.commitWait()
		if n := p.br.j.StoredMessages(); n != 1 {
			t.Fatalf("%d messages stored after a QoS 1 PUBLISH to persistent sessions, want 1", n)
		}
		p.acks()
		if n := p.br.j.StoredMessages(); n != 0 {
			t.Fatalf("%d messages stored once every subscriber acknowledged, want 0", n)
		}
	}
	return p
}

// op is one message through the path: published, delivered, and at QoS 1 acknowledged by
// every subscriber and the peer.
func (p *pathHarness) op() {
	p.br.OnData(p.pub, p.publish)
	p.br.commitWait()
	if p.qos == 1 {
		p.acks()
		if p.peer != nil && !p.peer.ack() {
			panic("the peer has no done to call")
		}
	}
}

func (p *pathHarness) acks() {
	for _, c := range p.subs {
		p.br.OnData(c, p.ack)
	}
	p.br.commitWait()
}

// check verifies that the messages went where they should: every subscriber got them,
// nothing is left in flight, the publisher got its PUBACKs.
func (p *pathHarness) check(t *testing.T, runs int) {
	t.Helper()
	for i, c := range p.subs {
		if c.written.Load() < int64(runs*64) {
			t.Errorf("sub-%d got %d bytes for %d messages of 64", i, c.written.Load(), runs)
		}
		if in, queued := p.br.sessions.m[fmt.Sprint("sub-", i)].Pending(); in != 0 || queued != 0 {
			t.Errorf("sub-%d: %d messages in flight, %d queued after every PUBACK", i, in, queued)
		}
	}
	if p.qos == 1 && p.pub.written.Load() < int64(runs*4) {
		t.Errorf("the publisher got %d bytes for %d PUBACKs", p.pub.written.Load(), runs)
	}
}
