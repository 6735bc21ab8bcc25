package interop

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// QoS 0, 1 and 2 in both directions, inflight windows, exactly-once across reconnects,
// redelivery and ordering.
var qosScenarios = []scenario{
	{name: "qos/levels", run: testQoSLevels},
	{name: "qos/receive-maximum", run: testReceiveMaximum, tune: func(c *conf.Config) { c.MQTT.ReceiveMaximum = 2 }},
	{name: "qos/exactly-once-inbound", run: testExactlyOnceInbound},
	{name: "qos/exactly-once-outbound", run: testExactlyOnceOutbound},
	{name: "qos/redelivery-dup", run: testRedeliveryDup},
	{name: "qos/ordering", run: testOrdering},
}

// testQoSLevels: every publish QoS against every subscription QoS; the message arrives
// once, at the lower of the two [MQTT-3.8.4-8], with every flow completed in both
// directions (later messages would stall otherwise).
func testQoSLevels(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	sub := e.connect(t, clean("sub"))
	for q := range byte(3) {
		sub.sub(t, q, fmt.Sprintf("lv/%d", q))
	}
	for round := range 2 {
		for pq := range byte(3) {
			for sq := range byte(3) {
				payload := fmt.Sprintf("round %d pub %d sub %d", round, pq, sq)
				pub.pub(t, fmt.Sprintf("lv/%d", sq), pq, false, payload)
				m := sub.inbox().next(t)
				if m.Payload != payload || m.QoS != min(pq, sq) || m.Dup || m.Retain {
					t.Fatalf("got %+v, want %q at QoS %d", m, payload, min(pq, sq))
				}
			}
		}
	}
}

// testReceiveMaximum: the broker sends no more unacknowledged QoS 1 and 2 messages than the
// client's Receive Maximum (5.0) or its configured window (3.1.1, here 2) [MQTT-3.3.4-7],
// queues the rest and sends them, in order, as acknowledgements free the window.
func testReceiveMaximum(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))

	t.Run("raw", func(t *testing.T) {
		r := e.raw(t)
		r.session("window", false, func(c *packet.Connect) {
			if e.v5() {
				c.Props.ReceiveMaximum = packet.Some[uint16](2)
			}
		})
		r.subscribe(1, 2, 0, "rm/1", "rm/2")
		for i := range 4 {
			pub.pub(t, "rm/1", 1, false, strconv.Itoa(i))
		}
		p0, p1 := r.expectPublish("rm/1", "0"), r.expectPublish("rm/1", "1")
		r.none() // the window is full
		r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p1.PacketID})
		p2 := r.expectPublish("rm/1", "2")
		r.none()
		r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p0.PacketID})
		p3 := r.expectPublish("rm/1", "3")
		r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p2.PacketID})
		r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p3.PacketID})

		// QoS 2 holds its slot until PUBCOMP, past PUBREC.
		for i := range 3 {
			pub.pub(t, "rm/2", 2, false, strconv.Itoa(i))
		}
		q0, q1 := r.expectPublish("rm/2", "0"), r.expectPublish("rm/2", "1")
		r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: q0.PacketID})
		r.expectAck(packet.PUBREL, q0.PacketID)
		r.none()
		r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: q0.PacketID})
		q2 := r.expectPublish("rm/2", "2")
		for _, p := range []*packet.Publish{q1, q2} {
			if p.QoS != 2 {
				t.Fatalf("QoS %d, want 2", p.QoS)
			}
			r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: p.PacketID})
			r.expectAck(packet.PUBREL, p.PacketID)
			r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: p.PacketID})
		}
	})

	t.Run("paho", func(t *testing.T) {
		o := clean("many")
		o.recvMax = 2
		sub := e.connect(t, o)
		sub.sub(t, 2, "rm/many/+")
		const n = 60
		for q := byte(1); q <= 2; q++ {
			topic := fmt.Sprintf("rm/many/%d", q)
			for i := range n {
				pub.pub(t, topic, q, false, strconv.Itoa(i))
			}
			for i, m := range sub.inbox().take(t, n) {
				if m.Topic != topic || m.Payload != strconv.Itoa(i) || m.QoS != q {
					t.Fatalf("message %d: got %+v", i, m)
				}
			}
		}
	})
}

// testExactlyOnceInbound: the broker keeps a QoS 2 PUBLISH's packet id from PUBREC to
// PUBREL across reconnects of a persistent session, so a resent PUBLISH is acknowledged
// again but not delivered again (spec 4.3.3, method A), and PUBREL completes it.
func testExactlyOnceInbound(t *testing.T, e *env) {
	sub := e.connect(t, clean("sub"))
	sub.sub(t, 2, "eo/#")

	r := e.raw(t)
	r.session("pub", true, nil)
	once := &packet.Publish{Topic: []byte("eo/t"), Payload: []byte("once"), QoS: 2, PacketID: 7}
	r.send(once)
	r.expectAck(packet.PUBREC, 7)
	if m := sub.inbox().next(t); m.Payload != "once" || m.QoS != 2 {
		t.Fatalf("got %+v", m)
	}
	r.drop() // no PUBREL: the connection is lost mid-flow

	r = e.raw(t)
	if ack := r.session("pub", true, nil); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	once.Dup = true
	r.send(once) // the client does not know whether PUBREC was received: it resends
	r.expectAck(packet.PUBREC, 7)
	r.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 7})
	if a := r.expectAck(packet.PUBCOMP, 7); a.Code != packet.Success {
		t.Fatalf("PUBCOMP %v, want success", a.Code)
	}
	// The id is released: a second PUBREL is for an unknown id (0x92 in 5.0).
	r.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 7})
	a := r.expectAck(packet.PUBCOMP, 7)
	if e.v5() && a.Code != packet.PacketIdentifierNotFound {
		t.Fatalf("PUBCOMP %v, want packet identifier not found", a.Code)
	}
	r.publish(8, 2, "eo/marker", "")
	if got := sub.inbox().until(t, "eo/marker"); len(got) != 0 {
		t.Fatalf("delivered again: %+v", got)
	}
}

// testExactlyOnceOutbound: a QoS 2 message the client has PUBRECed is, after a reconnect,
// completed with PUBREL, never sent again [MQTT-4.4.0-1].
func testExactlyOnceOutbound(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	r := e.raw(t)
	r.session("sub", true, nil)
	r.subscribe(1, 2, 0, "eo/out")
	pub.pub(t, "eo/out", 2, false, "x")
	p := r.expectPublish("eo/out", "x")
	r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: p.PacketID})
	r.expectAck(packet.PUBREL, p.PacketID)
	r.drop() // no PUBCOMP

	r = e.raw(t)
	if ack := r.session("sub", true, nil); !ack.SessionPresent {
		t.Fatal("session not present")
	}
	r.expectAck(packet.PUBREL, p.PacketID)
	r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: p.PacketID})
	pub.pub(t, "eo/out", 2, false, "next")
	n := r.expectPublish("eo/out", "next")
	if n.Dup {
		t.Fatal("a new message with DUP set")
	}
}

// testRedeliveryDup: QoS 1 and 2 messages sent and not acknowledged are sent again, with
// DUP set and the same packet ids, in order, when the persistent session resumes
// [MQTT-4.4.0-1], [MQTT-3.3.1-1]; the new connection can then complete them.
func testRedeliveryDup(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	r := e.raw(t)
	r.session("sub", true, nil)
	r.subscribe(1, 2, 0, "dup/#")
	pub.pub(t, "dup/1", 1, false, "a")
	pub.pub(t, "dup/2", 2, false, "b")
	a, b := r.expectPublish("dup/1", "a"), r.expectPublish("dup/2", "b")
	if a.Dup || b.Dup {
		t.Fatal("first delivery with DUP set")
	}
	r.drop()

	r = e.raw(t)
	r.session("sub", true, nil)
	for _, want := range []*packet.Publish{a, b} {
		got := r.expectPublish(string(want.Topic), string(want.Payload))
		if !got.Dup || got.PacketID != want.PacketID || got.QoS != want.QoS {
			t.Fatalf("redelivered %+v, want DUP, packet id %d, QoS %d", got, want.PacketID, want.QoS)
		}
	}
	r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: a.PacketID})
	r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: b.PacketID})
	r.expectAck(packet.PUBREL, b.PacketID)
	r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: b.PacketID})
	r.leave()

	// Completed: nothing is sent again on the next resume.
	r = e.raw(t)
	r.session("sub", true, nil)
	pub.pub(t, "dup/marker", 1, false, "")
	r.expectPublish("dup/marker", "")
}

// testOrdering: messages one client publishes to a topic reach a subscriber in the order
// published, per QoS (spec 4.6), with topics interleaved.
func testOrdering(t *testing.T, e *env) {
	const n = 50
	pub := e.connect(t, clean("pub"))
	sub := e.connect(t, clean("sub"))
	sub.sub(t, 2, "ord/#")
	topics := []string{"ord/a", "ord/b"}
	for q := range byte(3) {
		for i := range n {
			for _, tp := range topics {
				pub.pub(t, fmt.Sprintf("%s/%d", tp, q), q, false, strconv.Itoa(i))
			}
		}
	}
	next := map[string]int{}
	for _, m := range sub.inbox().take(t, 3*n*len(topics)) {
		i, err := strconv.Atoi(m.Payload)
		if err != nil || i != next[m.Topic] {
			t.Fatalf("on %s got %q, want %d", m.Topic, m.Payload, next[m.Topic])
		}
		next[m.Topic]++
	}
}
