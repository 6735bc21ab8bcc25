package hostile

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/packet/packettest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestSubscribeFlood: one client sends SUBSCRIBE after SUBSCRIBE, each with many filters,
// without waiting for the SUBACKs. Every SUBSCRIBE is answered in order, with one code per
// filter (granted, or 0x97 quota exceeded once a per-client limit exists); the heap grows
// by a bounded amount per subscription and comes back when the client leaves; the healthy
// client is served throughout. Re-subscribing to the same filters replaces them
// [MQTT-3.8.4-3]: no growth.
func TestSubscribeFlood(t *testing.T) {
	packets, filters := 50, 1000
	if testenv.CI() {
		packets = 10
	}
	e := start(t, nil)
	h := e.healthy(t)
	subs0 := e.metric(t, "bifrost_subscriptions_current")
	heap0 := liveHeap()

	r := e.dial(t, packet.V5)
	r.connect("flooder", nil)
	build := func(pid uint16, set int) []byte {
		s := &packet.Subscribe{PacketID: pid}
		for f := range filters {
			s.Subscriptions = append(s.Subscriptions, packet.Subscription{Filter: fmt.Appendf(nil, "flood/%d/%d", set, f), QoS: 1})
		}
		return s.AppendTo(nil, packet.V5)
	}
	// flood sends the SUBSCRIBEs, each with a new set of filters or all with the first.
	flood := func(distinct bool) (granted int, took time.Duration, at []time.Duration) {
		var bufs [][]byte
		for p := range packets {
			set := 0
			if distinct {
				set = p
			}
			bufs = append(bufs, build(uint16(p+1), set))
		}
		t0 := time.Now()
		go func() { // written while the SUBACKs are read: the broker must not wait for us
			for _, b := range bufs {
				if err := r.write(b); err != nil {
					return
				}
			}
		}()
		for p := range packets {
			ack := expect[*packet.Suback](r)
			at = append(at, time.Since(t0))
			if ack.PacketID != uint16(p+1) || len(ack.Codes) != filters {
				t.Fatalf("SUBACK for packet id %d with %d codes, want %d with %d", ack.PacketID, len(ack.Codes), p+1, filters)
			}
			for _, c := range ack.Codes {
				switch {
				case c == packet.GrantedQoS1:
					granted++
				case c != packet.QuotaExceeded:
					t.Fatalf("SUBACK code %v", c)
				}
			}
		}
		return granted, time.Since(t0), at
	}

	granted, took, at := flood(true)
	heap1 := liveHeap()
	grew := int64(heap1) - int64(heap0)
	t.Logf("%d SUBSCRIBEs of %d filters: %d granted in %v (%.0f µs per SUBSCRIBE); heap %s, %d bytes per subscription",
		packets, filters, granted, took.Round(time.Millisecond), float64(took.Microseconds())/float64(packets), mib(grew), grew/int64(max(granted, 1)))
	if got := e.metric(t, "bifrost_subscriptions_current") - subs0; int(got) != granted {
		t.Errorf("bifrost_subscriptions_current grew by %v, want %d", got, granted)
	}
	if granted > 0 && grew/int64(granted) > 2048 {
		t.Errorf("%d bytes of heap per subscription", grew/int64(granted))
	}
	if granted == packets*filters {
		t.Logf("no per-client subscription limit: one client holds %d subscriptions", granted)
	}
	h.check(t)
	// Each SUBSCRIBE adds as many filters: the last ones should cost what the first did.
	// Logged, not asserted: wall-clock times on a shared machine are no test. That a
	// session's subscriptions are indexed once there are many (so that session.AddSub and
	// HasRoom do not scan them all, quadratic in a flood) is asserted by session.TestSubsMany and
	// measured by session.BenchmarkAddSub.
	q := packets / 4
	first, last := at[q-1], at[packets-1]-at[packets-1-q]
	t.Logf("first %d SUBSCRIBEs answered in %v, last %d in %v", q, first.Round(time.Millisecond), q, last.Round(time.Millisecond))

	// The same filters again, and again: replaced, not added.
	_, took, _ = flood(false)
	again := int64(liveHeap()) - int64(heap1)
	t.Logf("%d SUBSCRIBEs repeating %d filters: %v, heap %+d bytes", packets, filters, took.Round(time.Millisecond), again)
	if again > 4<<20 {
		t.Errorf("re-subscribing to the same filters grew the heap by %s", mib(again))
	}
	h.check(t)

	r.send(&packet.Disconnect{})
	r.closed()
	testenv.WaitFor(t, "the flooder's subscriptions removed", func() bool {
		return e.metric(t, "bifrost_subscriptions_current") == subs0
	})
	testenv.WaitFor(t, "the heap to come back", func() bool { return int64(liveHeap())-int64(heap0) < 4<<20 })
	h.check(t)
}

// deaf is a client that subscribes and then never reads again: its socket's receive
// buffer fills, then the broker's send buffer, then whatever the broker queues for it.
type deaf struct {
	conn net.Conn
	br   *bufio.Reader // for a client that starts reading after all
}

// dialDeaf connects a 5.0 client that announces the largest Receive Maximum (65,535), with
// a socket receive buffer of rcvbuf bytes, subscribes to filter at qos and stops reading.
func (e *env) dialDeaf(t *testing.T, id, filter string, qos byte, rcvbuf int) *deaf {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, testenv.Timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(rcvbuf)
	br := bufio.NewReader(c)
	con := &packet.Connect{Version: packet.V5, ClientID: []byte(id), CleanStart: true, KeepAlive: 0}
	con.Props.ReceiveMaximum = packet.Some[uint16](65535)
	sub := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: qos}}}
	if _, err := c.Write(append(con.AppendTo(nil, packet.V5), sub.AppendTo(nil, packet.V5)...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
	for _, want := range []packet.Type{packet.CONNACK, packet.SUBACK} {
		p, err := packettest.ReadPacket(br, packet.V5)
		if err != nil || p.Type() != want {
			t.Fatalf("deaf client got %v, %v; want %v", p, err, want)
		}
	}
	return &deaf{conn: c, br: br}
}

// TestNeverReads: a subscriber that never reads must not make the broker grow without
// bound while a publisher floods its topic. QoS 0 messages are shed once its connection
// is backed up (counted as slow_consumer drops); QoS 1 messages are not written to a
// backed-up connection, however large the client's Receive Maximum, but wait in a queue
// bounded by queue.offline_messages and queue.offline_bytes (beyond it, counted as
// queue_full drops). Either way the heap stays within a few MiB of those bounds, the
// publisher and the healthy client are served throughout, and the memory comes back when
// the subscriber goes.
func TestNeverReads(t *testing.T) {
	const size = 16 << 10
	total := 64 << 20
	if testenv.CI() {
		total = 32 << 20
	}
	const queueBytes = 4 << 20
	e := start(t, func(c *conf.Config) { c.Queue.OfflineBytes = queueBytes })
	h := e.healthy(t)
	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			heap0 := liveHeap()
			dropped0 := e.metric(t, "bifrost_messages_dropped_total")
			full0 := e.metric(t, "bifrost_messages_dropped_total", `reason="queue_full"`)
			topic := fmt.Sprintf("deaf/%d", qos)
			d := e.dialDeaf(t, "deaf-"+topic, topic, qos, 4<<10)
			pub := e.dial(t, packet.V5)
			pub.connect(fmt.Sprintf("flood-%d", qos), nil)
			payload := make([]byte, size)
			n := total / size
			for i := range n {
				p := &packet.Publish{Topic: []byte(topic), Payload: payload, QoS: qos}
				if qos > 0 {
					p.PacketID = uint16(i%60000 + 1)
				}
				pub.send(p)
				if qos > 0 {
					pub.ackFor(packet.PUBACK, p.PacketID) // one at a time: the publisher is served
				}
			}
			pub.alive()
			grew := int64(liveHeap()) - int64(heap0)
			dropped := e.metric(t, "bifrost_messages_dropped_total") - dropped0
			t.Logf("published %s in %d QoS %d messages to a client that never reads: heap %s, %v dropped (%v slow_consumer, %v queue_full)",
				mib(int64(total)), n, qos, mib(grew), dropped,
				e.metric(t, "bifrost_messages_dropped_total", `reason="slow_consumer"`),
				e.metric(t, "bifrost_messages_dropped_total", `reason="queue_full"`))
			h.check(t)
			// The bound: the queue, plus what was written before the connection backed up
			// (the socket buffers' worth, whose messages stay in flight) and slack.
			limit := int64(queueBytes + 8<<20)
			if grew > limit {
				t.Errorf("heap grew by %s, more than the %s the bounds allow", mib(grew), mib(limit))
			}
			if qos == 0 && dropped == 0 {
				t.Errorf("no QoS 0 message was shed for the slow consumer")
			}
			if full := e.metric(t, "bifrost_messages_dropped_total", `reason="queue_full"`) - full0; qos > 0 && full == 0 {
				t.Errorf("no QoS 1 message found the queue full: %s to a client that never reads went somewhere unbounded", mib(int64(total)))
			}
			_ = d.conn.Close()
			testenv.WaitFor(t, "the heap to come back after the deaf client left", func() bool {
				return int64(liveHeap())-int64(heap0) < 4<<20
			})
		})
	}
}

// TestLateReader: a QoS 1 subscriber that stops reading while megabytes are published to
// it, more than the socket buffers hold, then reads them all and only then acknowledges
// them. The broker holds what its connection cannot take in the session's queue and
// resumes as the connection drains, with no acknowledgement to prompt it: every message
// arrives, in order, none dropped.
func TestLateReader(t *testing.T) {
	const size, n = 16 << 10, 512 // 8 MiB: more than loopback's socket buffers
	e := start(t, nil)
	h := e.healthy(t)
	full0 := e.metric(t, "bifrost_messages_dropped_total", `reason="queue_full"`)
	// A receive buffer large enough for the kernel to keep the data moving once the client
	// reads (a tiny one stalls loopback TCP in its silly-window avoidance), small enough
	// that the broker's socket buffer and this one hold far less than what is published.
	d := e.dialDeaf(t, "late", "late/#", 1, 256<<10)
	pub := e.dial(t, packet.V5)
	pub.connect("late-pub", nil)
	payload := make([]byte, size)
	for i := range n {
		pub.send(&packet.Publish{Topic: fmt.Appendf(nil, "late/%d", i), Payload: payload, QoS: 1, PacketID: uint16(i + 1)})
		pub.ackFor(packet.PUBACK, uint16(i+1))
	}
	pub.alive()
	h.check(t)

	var pids []uint16
	_ = d.conn.SetReadDeadline(time.Now().Add(testenv.Timeout))
	for i := range n {
		p, err := packettest.ReadPacket(d.br, packet.V5)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, n, err)
		}
		m, ok := p.(*packet.Publish)
		if !ok || string(m.Topic) != fmt.Sprintf("late/%d", i) || m.QoS != 1 {
			t.Fatalf("message %d: %v %+v, want PUBLISH late/%d at QoS 1", i, p.Type(), p, i)
		}
		pids = append(pids, m.PacketID)
	}
	var acks []byte
	for _, pid := range pids {
		acks = (&packet.Ack{PacketType: packet.PUBACK, PacketID: pid}).AppendTo(acks, packet.V5)
	}
	if _, err := d.conn.Write(acks); err != nil {
		t.Fatal(err)
	}
	if full := e.metric(t, "bifrost_messages_dropped_total", `reason="queue_full"`) - full0; full != 0 {
		t.Errorf("%v messages dropped as queue_full, within the queue's bounds", full)
	}
	h.check(t)
}
