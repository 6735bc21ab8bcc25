package broker

import (
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// TestDollarWill: a will on a topic starting with $ refuses the CONNECT with not
// authorized (v5 0x87, 3.1.1 return code 5), as a will the ACL denies would; and a will
// that got past CONNECT all the same (stored by an older version) is never published nor
// retained (spec 4.7.2).
func TestDollarWill(t *testing.T) {
	b := benchBroker(t)
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		for _, topic := range []string{"$SYS/broker/clients", "$SYS", "$share/g/t", "$other/t"} {
			t.Run(v.String()+"/"+topic, func(t *testing.T) {
				c := &authTestConn{}
				b.OnOpen(c)
				b.OnData(c, (&packet.Connect{Version: v, CleanStart: true, ClientID: []byte("w"),
					WillFlag: true, WillTopic: []byte(topic), WillPayload: []byte("spoofed"), WillRetain: true}).AppendTo(nil, v))
				ps := c.packets(t, v)
				if len(ps) != 1 {
					t.Fatalf("answers %v, want one CONNACK", types(ps))
				}
				if ack, ok := ps[0].(*packet.Connack); !ok || ack.Code != packet.NotAuthorized {
					t.Fatalf("answer %+v, want CONNACK not authorized", ps[0])
				}
				if !c.isClosed() {
					t.Fatal("connection left open")
				}
			})
		}
	}

	t.Run("publishWill", func(t *testing.T) {
		w := &authTestConn{}
		b.OnOpen(w)
		b.OnData(w, connectPacket(packet.V5, "watcher", "", ""))
		b.OnData(w, (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
			{Filter: []byte("$SYS/#")}, {Filter: []byte("$other/#")}}}).AppendTo(nil, packet.V5))
		before := len(w.packets(t, packet.V5))
		bt := b.getBatch()
		for _, topic := range []string{"$SYS/broker/clients", "$other/t"} {
			b.publishWill(bt, &session.Will{Msg: session.NewLocalMessage(topic, []byte("spoofed"), 0, true)})
		}
		b.endBatch(bt)
		if ps := w.packets(t, packet.V5); len(ps) != before {
			t.Fatalf("$ wills published: %v", types(ps[before:]))
		}
		if n := b.retained.tree.Len(); n != 0 {
			t.Fatalf("%d retained messages after $ wills", n)
		}
		if err := b.Publish("$SYS/broker/marker", []byte("m"), 0, false); err != nil {
			t.Fatal(err)
		}
		if ps := w.packets(t, packet.V5); len(ps) != before+1 {
			t.Fatalf("the broker's own $SYS publish: %d packets, want 1", len(ps)-before)
		}
	})
}

// TestWillDelayReconnectRace: the client's CONNECT claims its session after the old
// connection went offline but before the broker scheduled the delayed will (another
// poller, or the portable engine's goroutine per connection): the client is back, and the
// will is neither pending nor scheduled [MQTT-3.1.3-9].
func TestWillDelayReconnectRace(t *testing.T) {
	b := benchBroker(t)
	s := b.claimSession("racer", false, nil, owner{}).s // the reconnect's claim, not yet attached
	b.scheduleWill(s, &session.Will{Delay: 3}, time.Hour)
	b.mu.Lock()
	scheduled := b.sessions.wills[s] != nil
	b.mu.Unlock()
	if pending := s.PendingWill() != nil; scheduled || pending {
		t.Fatalf("will scheduled %v, pending %v after the client's CONNECT claimed the session", scheduled, pending)
	}
	b.attached(s)
}
