package broker

import (
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// TestSlowConsumerDurable: QoS 1 messages for a persistent session whose connection is
// backed up are not written but queued, in the store, and acknowledged to the publisher
// once stored; they go out, in order and none lost, when the connection drains (the
// listener's notice, OnDrained) or, if it is lost instead, when the client comes back.
func TestSlowConsumerDurable(t *testing.T) {
	for _, end := range []string{"drain", "reconnect"} {
		t.Run(end, func(t *testing.T) {
			st := store.NewMemory()
			defer st.Close()
			b := storeBroker(t, st, nil)
			sub := dialT(t, b, packet.V5, "sub", persist(300))
			sub.subscribe(1, 1, "s/#")
			sub.c.buffered.Store(1 << 20) // far beyond the broker's slow-consumer threshold
			pub := dialT(t, b, packet.V5, "pub", nil)
			var want, acks []string
			for i := range 5 {
				pub.publish(uint16(i+1), 1, false, fmt.Sprintf("s/%d", i), "m")
				want = append(want, fmt.Sprintf(`PUBLISH s/%d q1 "m"`, i))
				acks = append(acks, fmt.Sprintf("PUBACK %d", i+1))
			}
			equalLines(t, "publisher", pub.lines(), acks)
			if got := sub.lines(); len(got) != 0 {
				t.Fatalf("written to a backed-up connection: %q", got)
			}
			if q := loadDump(t, st).queued["sub"]; len(q) != 5 {
				t.Fatalf("%d messages queued in the store, want 5", len(q))
			}
			if !sub.c.notice.Load() {
				t.Fatal("no drain notice asked for")
			}

			switch end {
			case "drain":
				sub.c.buffered.Store(0)
				sub.c.notice.Store(false)
				b.OnDrained(sub.c)
			case "reconnect":
				sub.drop()
				sub = dialT(t, b, packet.V5, "sub", persist(300))
			}
			var pids []uint16
			var got []string
			for _, p := range sub.packets() {
				got = append(got, describeP(p))
				pids = append(pids, p.(*packet.Publish).PacketID)
			}
			equalLines(t, "subscriber", got, want)
			for _, pid := range pids {
				sub.ack(packet.PUBACK, pid)
			}
			b.commitWait()
			if q := loadDump(t, st).queued["sub"]; len(q) != 0 {
				t.Fatalf("%d messages left in the store after their PUBACKs", len(q))
			}
		})
	}
}
