package broker

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// TestRoundFlushesOnce: what a poller's round hands the broker (OnRoundData) is written
// when the round ends (EndRound), each session's bytes in one write: a subscriber that
// several publishers of the round wrote to gets their messages together and in order, and
// the publishers their acknowledgements.
func TestRoundFlushesOnce(t *testing.T) {
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			st := store.NewMemory()
			defer st.Close()
			b := storeBroker(t, st, nil)
			sub := dialT(t, b, v, "sub", nil)
			sub.subscribe(1, 1, "r/#")
			p1 := dialT(t, b, v, "p1", nil)
			p2 := dialT(t, b, v, "p2", nil)
			round := func(c *tclient, p *packet.Publish) { b.OnRoundData(c.c, p.AppendTo(nil, v), 0) }

			writes := sub.c.writeCalls()
			round(p1, &packet.Publish{Topic: []byte("r/1"), Payload: []byte("a"), QoS: 1, PacketID: 1})
			round(p2, &packet.Publish{Topic: []byte("r/2"), Payload: []byte("b")})
			round(p1, &packet.Publish{Topic: []byte("r/3"), Payload: []byte("c"), QoS: 1, PacketID: 2})
			if n := sub.c.writeCalls() - writes; n != 0 {
				t.Fatalf("%d writes to the subscriber before the round ended", n)
			}
			if got := p1.c.take(); len(got) != 0 {
				t.Fatalf("acknowledged before the round ended: % x", got)
			}
			b.EndRound(0)
			if n := sub.c.writeCalls() - writes; n != 1 {
				t.Errorf("%d writes to the subscriber for the round, want 1", n)
			}
			equalLines(t, "subscriber got", sub.lines(),
				[]string{`PUBLISH r/1 q1 "a"`, `PUBLISH r/2 q0 "b"`, `PUBLISH r/3 q1 "c"`})
			equalLines(t, "p1 got", p1.lines(), []string{"PUBACK 1", "PUBACK 2"})
			b.EndRound(0) // nothing handled since: nothing written
			if n := sub.c.writeCalls() - writes; n != 1 {
				t.Errorf("%d writes after an empty round, want still 1", n)
			}
		})
	}
}

// TestRoundFlushesEarly: a round that has handled roundBytes writes what it holds before
// it ends, so a flooding publisher cannot pile up a round's worth of output.
func TestRoundFlushesEarly(t *testing.T) {
	st := store.NewMemory()
	defer st.Close()
	b := storeBroker(t, st, nil)
	sub := dialT(t, b, packet.V5, "sub", nil)
	sub.subscribe(1, 0, "big")
	pub := dialT(t, b, packet.V5, "pub", nil)
	payload := strings.Repeat("x", 16<<10)
	writes := sub.c.writeCalls()
	for range roundBytes/len(payload) + 1 {
		b.OnRoundData(pub.c, (&packet.Publish{Topic: []byte("big"), Payload: []byte(payload)}).AppendTo(nil, packet.V5), 1)
	}
	if n := sub.c.writeCalls() - writes; n != 1 {
		t.Errorf("%d writes before the round ended, after more than %d bytes: want 1", n, roundBytes)
	}
	b.EndRound(1)
	if got, want := len(sub.lines()), roundBytes/len(payload)+1; got != want {
		t.Errorf("%d messages delivered, want %d", got, want)
	}
}
