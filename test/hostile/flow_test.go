package hostile

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestFlows abuses the QoS and topic-alias state machines with packets that are well
// formed but out of place: acknowledgements for packet ids never used, a QoS 2 PUBLISH
// replayed, more QoS 2 messages in flight than the broker allows, aliases that were never
// set on this connection. Each gets the spec's answer; the ones that are not a violation
// leave the connection served.
func TestFlows(t *testing.T) {
	e := start(t, nil)
	h := e.healthy(t)
	t.Run("cases", func(t *testing.T) {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			run := func(name string, f func(t *testing.T, e *env, v packet.Version, id string)) {
				t.Run(v.String()+"/"+name, func(t *testing.T) {
					t.Parallel()
					f(t, e, v, fmt.Sprintf("%v-%s", v, name))
				})
			}
			run("pubrel-unknown-id", testPubrelUnknown)
			run("puback-pubcomp-unknown-id", testPubackUnknown)
			run("pubrec-unknown-id", testPubrecUnknown)
			run("qos2-replayed-with-dup", func(t *testing.T, e *env, v packet.Version, id string) {
				testQoS2Replay(t, e, v, id, true)
			})
			run("qos2-replayed-without-dup", func(t *testing.T, e *env, v packet.Version, id string) {
				testQoS2Replay(t, e, v, id, false)
			})
			if v == packet.V5 {
				run("receive-maximum-exceeded", testReceiveMaximum)
				run("topic-alias-from-earlier-connection", testAliasAcrossConnections)
				run("maximum-packet-size-below-connack", testTinyMaximumPacket)
				run("resume-beyond-receive-maximum", testResumeWindow)
			}
		}
	})
	h.check(t)
}

// testPubrelUnknown: a PUBREL for a packet id that is not awaiting one is answered with
// PUBCOMP, 0x92 (packet identifier not found) in 5.0 (spec 3.7.2.1, 4.3.3), and the
// connection goes on.
func testPubrelUnknown(t *testing.T, e *env, v packet.Version, id string) {
	r := e.dial(t, v)
	r.connect(id, nil)
	r.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 77})
	r.expectAck(packet.PUBCOMP, 77, packet.PacketIdentifierNotFound)
	if got := r.alive(); len(got) != 0 {
		t.Fatalf("unexpected %v", got[0].Type())
	}
}

// testPubackUnknown: a PUBACK or PUBCOMP for a packet id the broker never used is
// ignored: no answer, no disconnect.
func testPubackUnknown(t *testing.T, e *env, v packet.Version, id string) {
	r := e.dial(t, v)
	r.connect(id, nil)
	r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 78})
	r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: 79})
	if got := r.alive(); len(got) != 0 {
		t.Fatalf("unexpected %v %+v", got[0].Type(), got[0])
	}
}

// testPubrecUnknown: a PUBREC for a packet id not in flight is answered with PUBREL,
// 0x92 in 5.0 (spec 3.6.2.1, 4.3.3), and the connection goes on.
func testPubrecUnknown(t *testing.T, e *env, v packet.Version, id string) {
	r := e.dial(t, v)
	r.connect(id, nil)
	r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: 80})
	r.expectAck(packet.PUBREL, 80, packet.PacketIdentifierNotFound)
	if got := r.alive(); len(got) != 0 {
		t.Fatalf("unexpected %v", got[0].Type())
	}
}

// testQoS2Replay: a QoS 2 PUBLISH sent again (with DUP, or without it as a confused
// client would) before its PUBREL is acknowledged with PUBREC again and not delivered
// again [MQTT-4.3.3-9] (3.1.1: [MQTT-4.3.3-2]); after PUBREL and PUBCOMP the packet id is
// free and a new message with it is a new message [MQTT-4.3.3-10]. A second PUBREL finds
// the id gone: PUBCOMP 0x92.
func testQoS2Replay(t *testing.T, e *env, v packet.Version, id string, dup bool) {
	topic := "replay/" + id
	sub := e.dial(t, v)
	sub.connect(id+"-sub", nil)
	sub.subscribe(1, 2, topic)

	pub := e.dial(t, v)
	pub.connect(id, nil)
	first := &packet.Publish{Topic: []byte(topic), Payload: []byte("one"), QoS: 2, PacketID: 5}
	pub.send(first)
	pub.expectAck(packet.PUBREC, 5, packet.Success)
	for range 3 {
		again := *first
		again.Dup = dup
		pub.send(&again)
		pub.expectAck(packet.PUBREC, 5, packet.Success)
	}
	pub.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 5})
	pub.expectAck(packet.PUBCOMP, 5, packet.Success)
	pub.send(&packet.Ack{PacketType: packet.PUBREL, PacketID: 5})
	pub.expectAck(packet.PUBCOMP, 5, packet.PacketIdentifierNotFound)
	pub.publish(5, 2, topic, "two")

	sub.receiveTopic(topic, "one")
	sub.receiveTopic(topic, "two") // not "one" again
	sub.none()
}

// testReceiveMaximum: the broker announces its Receive Maximum in CONNACK; a client with
// more unacknowledged QoS 2 messages in flight than that is disconnected with 0x93
// (receive maximum exceeded) [MQTT-3.3.4-9].
func testReceiveMaximum(t *testing.T, e *env, v packet.Version, id string) {
	r := e.dial(t, v)
	ack := r.connect(id, nil)
	if got := ack.Props.ReceiveMaximum.Get(65535); got != receiveMax {
		t.Fatalf("CONNACK Receive Maximum %d, want %d", got, receiveMax)
	}
	for pid := uint16(1); pid <= receiveMax; pid++ {
		r.send(&packet.Publish{Topic: []byte("rm/" + id), Payload: []byte("x"), QoS: 2, PacketID: pid})
		r.expectAck(packet.PUBREC, pid, packet.NoMatchingSubscribers)
	}
	r.send(&packet.Publish{Topic: []byte("rm/" + id), Payload: []byte("x"), QoS: 2, PacketID: receiveMax + 1})
	r.ended(packet.ReceiveMaximumExceeded)
}

// testAliasAcrossConnections: topic aliases live as long as the connection that set them
// [MQTT-3.3.2-7]: a client that reconnects and uses an alias it set on the previous
// connection is told it is unknown (protocol error, spec 3.3.2.3.4), not given the old topic.
func testAliasAcrossConnections(t *testing.T, e *env, v packet.Version, id string) {
	topic := "alias/" + id
	sub := e.dial(t, v)
	sub.connect(id+"-sub", nil)
	sub.subscribe(1, 0, topic)

	persist := func(c *packet.Connect) { c.CleanStart = false; c.Props.SessionExpiry = packet.Some[uint32](60) }
	r := e.dial(t, v)
	r.connect(id, persist)
	r.send(&packet.Publish{Topic: []byte(topic), Payload: []byte("set"), Props: packet.Properties{TopicAlias: packet.Some[uint16](1)}})
	r.send(&packet.Publish{Payload: []byte("used"), Props: packet.Properties{TopicAlias: packet.Some[uint16](1)}})
	sub.receiveTopic(topic, "set")
	sub.receiveTopic(topic, "used")
	r.send(&packet.Disconnect{})
	r.closed()

	again := e.dial(t, v)
	again.connect(id, persist)
	again.send(&packet.Publish{Payload: []byte("stale"), Props: packet.Properties{TopicAlias: packet.Some[uint16](1)}})
	again.ended(packet.ProtocolError)
	sub.none()
}

// testTinyMaximumPacket: a 5.0 client announces a Maximum Packet Size of 20 bytes, less
// than a CONNACK with every property the broker could send. The broker must not send more
// [MQTT-3.1.2-24], but the client must not be left without an answer either: it gets a
// CONNACK that fits (the properties it can do without dropped) and is served. Below the
// smallest CONNACK that says what the client must know (here 16 bytes), it is refused with
// a bare CONNACK (0x83) if that fits, or the connection closes without a word; never
// served without a CONNACK.
func testTinyMaximumPacket(t *testing.T, e *env, v packet.Version, id string) {
	for _, tc := range []struct {
		max    uint32
		refuse bool // a bare refusing CONNACK, then the close
		close  bool // the close alone
	}{{max: 20}, {max: 16}, {max: 15, refuse: true}, {max: 5, refuse: true}, {max: 4, close: true}, {max: 1, close: true}} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			r := e.dial(t, v)
			r.send(&packet.Connect{Version: v, ClientID: fmt.Appendf(nil, "%s-%d", id, tc.max), CleanStart: true, KeepAlive: 60,
				Props: packet.Properties{MaximumPacketSize: packet.Some(tc.max)}})
			r.send(packet.Pingreq{})
			switch p := r.nextOrEnd().(type) {
			case nil:
				if !tc.close {
					t.Fatal("closed without a CONNACK")
				}
			case *packet.Connack:
				if size := p.Size(packet.V5); uint32(size) > tc.max {
					t.Fatalf("%d-byte CONNACK to a client whose maximum is %d", size, tc.max)
				}
				switch {
				case tc.close:
					t.Fatalf("CONNACK %+v, want the close alone", p)
				case tc.refuse:
					if p.Code != packet.ImplementationSpecificError {
						t.Fatalf("CONNACK %v, want a refusal (0x83)", p.Code)
					}
					r.closed()
				default:
					if p.Code != packet.Success {
						t.Fatalf("CONNACK %v", p.Code)
					}
					if got := p.Props.TopicAliasMaximum.V; got != aliasMax {
						t.Fatalf("CONNACK Topic Alias Maximum %d, want %d: a limit was dropped", got, aliasMax)
					}
					expect[*packet.Pingresp](r)
				}
			default:
				t.Fatalf("got %v, want a CONNACK", p.Type())
			}
		})
	}
}

// testResumeWindow: a subscriber with a persistent session leaves three QoS 1 messages
// unacknowledged, then comes back announcing Receive Maximum 1. The messages in flight
// are resent with their packet ids [MQTT-4.4.0-1], but never more at once than the client
// now accepts [MQTT-3.3.4-9]: one, and the next after its PUBACK.
func testResumeWindow(t *testing.T, e *env, v packet.Version, id string) {
	topic := "window/" + id
	persist := func(max uint16) func(*packet.Connect) {
		return func(c *packet.Connect) {
			c.CleanStart = false
			c.Props.SessionExpiry = packet.Some[uint32](60)
			c.Props.ReceiveMaximum = packet.Some(max)
		}
	}
	sub := e.dial(t, v)
	sub.connect(id, persist(3))
	sub.subscribe(1, 1, topic)
	pub := e.dial(t, v)
	pub.connect(id+"-pub", nil)
	for i := range 3 {
		pub.publish(uint16(i+1), 1, topic, fmt.Sprint(i))
		expect[*packet.Publish](sub) // not acknowledged
	}
	_ = sub.conn.Close() // whether the broker has seen the close or takes the session over, the same
	<-sub.done

	again := e.dial(t, v)
	again.connect(id, persist(1))
	for i := range 3 {
		got := again.alive()
		if len(got) != 1 {
			t.Fatalf("%d packets resent at once to a client whose Receive Maximum is now 1, want 1 [MQTT-3.3.4-9]", len(got))
		}
		p, ok := got[0].(*packet.Publish)
		if !ok || !p.Dup || p.PacketID != uint16(i+1) || string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("resend %d: %+v, want PUBLISH %q with DUP and packet id %d", i, got[0], fmt.Sprint(i), i+1)
		}
		again.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID})
	}
	again.none()
}

// TestTakeoverStorm: clients fight over one client identifier, each CONNECT taking the
// session over from the connection before it, in 3.1.1 and 5.0 by turns. Every
// connection taken over is closed, a 5.0 one told why with DISCONNECT 0x8E (session taken
// over) [MQTT-3.1.4-3]; in the end the broker holds one connection for the identifier and
// its session still works, and the healthy client was served throughout.
func TestTakeoverStorm(t *testing.T) {
	n := 400
	if testenv.CI() {
		n = 100
	}
	e := start(t, nil)
	h := e.healthy(t)
	persist := func(c *packet.Connect) { c.CleanStart = false; c.Props.SessionExpiry = packet.Some[uint32](60) }
	var prev *raw
	for i := range n {
		v := []packet.Version{packet.V311, packet.V5}[i%2]
		r := e.dial(t, v)
		ack := r.connect("storm", persist)
		if i > 0 && !ack.SessionPresent {
			t.Fatalf("takeover %d: session present 0 for a session that lives on", i)
		}
		if prev != nil {
			prev.ended(packet.SessionTakenOver)
			_ = prev.conn.Close()
		}
		if i == 0 {
			r.subscribe(1, 1, "storm/t")
		}
		prev = r
	}
	pub := e.dial(t, packet.V5)
	pub.connect("storm-publisher", nil)
	pub.publish(1, 1, "storm/t", "still subscribed")
	prev.receiveTopic("storm/t", "still subscribed")
	testenv.WaitFor(t, "one connection besides the healthy and the publishing client's", func() bool { return e.conns(t) == 3 })
	h.check(t)
}
