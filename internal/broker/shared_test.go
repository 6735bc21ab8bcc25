package broker

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestSharedSoleMember: the messages a shared subscription gave a member, acknowledged to
// their publisher and not to the member, are not lost when that member's connection
// ends and no other member may take them (spec 4.8.2): the member's session keeps them,
// and its client gets them when it is back, whether it reconnected after its connection
// was lost or took over a connection still open.
func TestSharedSoleMember(t *testing.T) {
	for _, takeOver := range []bool{false, true} {
		t.Run(fmt.Sprintf("takeOver=%v", takeOver), func(t *testing.T) {
			b, _ := logBroker(t, nil)
			sub := dialT(t, b, packet.V5, "sub", func(c *packet.Connect) { persist(300)(c); window1(c) })
			sub.subscribe(1, 1, "$share/g/t/#")
			pub := dialT(t, b, packet.V5, "pub", nil)
			publishN(pub, "t/x", "pub", 0, 3) // one in flight, two queued
			equalLines(t, "acknowledged", pub.lines(), []string{"PUBACK 1", "PUBACK 2", "PUBACK 3"})
			equalLines(t, "sent", sub.lines(), []string{`PUBLISH t/x q1 "pub/0"`})
			if !takeOver {
				sub.drop()
			}
			sub = dialT(t, b, packet.V5, "sub", persist(300))
			equalLines(t, "resumed", sub.lines(), []string{
				`PUBLISH t/x q1 "pub/0"`, `PUBLISH t/x q1 "pub/1"`, `PUBLISH t/x q1 "pub/2"`})
		})
	}
}

// TestSharedRedelivered: what a member had unacknowledged when its connection ended goes
// to another member online, in order, and once that one acknowledges it nothing holds it
// (built with invariants, a reference let go twice on the way panics).
func TestSharedRedelivered(t *testing.T) {
	b, _ := logBroker(t, nil)
	a := dialT(t, b, packet.V5, "a", func(c *packet.Connect) { persist(300)(c); window1(c) })
	a.subscribe(1, 1, "$share/g/t/#")
	pub := dialT(t, b, packet.V5, "pub", nil)
	publishN(pub, "t/x", "pub", 0, 3) // one in flight, two queued
	equalLines(t, "sent to a", a.lines(), []string{`PUBLISH t/x q1 "pub/0"`})
	other := dialT(t, b, packet.V5, "b", nil)
	other.subscribe(1, 1, "$share/g/t/#")
	a.drop()
	ps := other.packets()
	var got []string
	for _, p := range ps {
		got = append(got, describeP(p))
		other.ack(packet.PUBACK, p.(*packet.Publish).PacketID)
	}
	equalLines(t, "redelivered to b", got, []string{
		`PUBLISH t/x q1 "pub/0"`, `PUBLISH t/x q1 "pub/1"`, `PUBLISH t/x q1 "pub/2"`})
	b.mu.Lock()
	sb := b.sessions.m["b"]
	b.mu.Unlock()
	if in, q := sb.Pending(); in+q != 0 {
		t.Errorf("b holds %d in flight, %d queued after its PUBACKs", in, q)
	}
	a = dialT(t, b, packet.V5, "a", persist(300))
	if got := a.lines(); len(got) != 0 {
		t.Errorf("a got %q back, want nothing: b took them", got)
	}
}
