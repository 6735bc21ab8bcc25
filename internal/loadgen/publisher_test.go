package loadgen

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestPublisherTemplate checks that the patched copies of the pre-encoded PUBLISH decode
// with the packet identifiers, send times and sequence numbers written into them.
func TestPublisherTemplate(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		for qos := range byte(3) {
			t.Run(fmt.Sprintf("%v/QoS=%d", v, qos), func(t *testing.T) {
				p := newPublisher(&client{v: v}, 7, "lg/run/fanin", qos, 40, 1)
				buf := p.fill(nil, 3, 100)
				var r packet.Reader
				r.Version = v
				r.Feed(buf)
				for i := range 3 {
					h, body, ok, err := r.Next()
					if err != nil || !ok {
						t.Fatalf("packet %d: ok %v, %v", i, ok, err)
					}
					var pub packet.Publish
					if err := pub.Decode(h, body, v); err != nil {
						t.Fatal(err)
					}
					if string(pub.Topic) != "lg/run/fanin" || pub.QoS != qos || len(pub.Payload) != 40 {
						t.Fatalf("decoded %q QoS %d, %d bytes", pub.Topic, pub.QoS, len(pub.Payload))
					}
					if qos > 0 && pub.PacketID != uint16(i+1) {
						t.Errorf("packet id %d, want %d", pub.PacketID, i+1)
					}
					if ts := int64(binary.BigEndian.Uint64(pub.Payload)); ts <= 0 || ts > now() {
						t.Errorf("send time %d, want in (0, %d]", ts, now())
					}
					if idx := binary.BigEndian.Uint32(pub.Payload[8:]); idx != 7 {
						t.Errorf("publisher index %d, want 7", idx)
					}
					if seq := binary.BigEndian.Uint32(pub.Payload[12:]); seq != uint32(100+i) {
						t.Errorf("sequence %d, want %d", seq, 100+i)
					}
				}
				if _, _, ok, _ := r.Next(); ok {
					t.Fatal("more than 3 packets")
				}
			})
		}
	}
}

func TestAllocPIDSkipsUsed(t *testing.T) {
	p := &publisher{}
	p.used.set(1)
	p.used.set(2)
	if got := p.allocPID(); got != 3 {
		t.Fatalf("allocPID = %d, want 3", got)
	}
	p.nextPID = 65534
	if a, b := p.allocPID(), p.allocPID(); a != 65535 || b != 4 {
		t.Fatalf("allocPID across the wrap = %d, %d; want 65535, 4 (0 is never an identifier)", a, b)
	}
}

// TestPublisherReceived: the closed loop's window counts what the slowest subscriber has
// not received, not deliveries summed over subscribers.
func TestPublisherReceived(t *testing.T) {
	p := newPublisher(&client{v: packet.V311}, 0, "lg/run/fanin", 1, 40, 3)
	for slot, n := range []int{5, 2, 7} {
		for range n {
			p.recv[slot].Add(1)
		}
	}
	if got := p.received(); got != 2 {
		t.Fatalf("received %d, want 2 (the slowest of 5, 2, 7)", got)
	}
}

// TestAwaitCutShort: the wait for the last deliveries says when the run's bound ended it
// with deliveries still due, so that what had not arrived is not taken for lost; a wait
// that saw them all does not.
func TestAwaitCutShort(t *testing.T) {
	p := &publisher{subs: 1}
	p.sent.Store(2)
	p.acked.Store(2)
	s := &subscriber{}
	s.received.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if awaitDeliveries(ctx, []*publisher{p}, []*subscriber{s}, true) {
		t.Fatal("a wait the context ended, one delivery due, reported as complete")
	}
	s.received.Store(2)
	if !awaitDeliveries(ctx, []*publisher{p}, []*subscriber{s}, true) {
		t.Fatal("every delivery in, reported as cut short")
	}
}
