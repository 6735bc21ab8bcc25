package loadgen_test

import (
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/loadgen"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A lossyBroker is just enough of an MQTT broker for a fan-in run at QoS 1: it
// acknowledges every PUBLISH and forwards it to every subscriber as many times as copies
// says for its sequence number (0: lost, 2: duplicated), and closes on DISCONNECT. With
// holdLast, the last subscriber to subscribe gets nothing until that many messages wait
// for it, then all of them.
type lossyBroker struct {
	l        net.Listener
	copies   func(seq uint32) int
	holdLast int

	mu   sync.Mutex
	subs []*lossyConn
	pid  uint16
	held [][]byte // for the last subscriber
}

type lossyConn struct {
	mu sync.Mutex
	nc net.Conn
}

func (c *lossyConn) write(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.nc.Write(b)
}

func startLossyBroker(t *testing.T, copies func(seq uint32) int, holdLast int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &lossyBroker{l: l, copies: copies, holdLast: holdLast}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { b.serve(&lossyConn{nc: nc}) })
		}
	})
	return l.Addr().String()
}

func (b *lossyBroker) serve(c *lossyConn) {
	defer c.nc.Close()
	var r packet.Reader
	buf := make([]byte, 64<<10)
	for {
		h, body, ok, err := r.Next()
		if err != nil {
			return
		}
		if !ok {
			n, err := c.nc.Read(buf)
			if err != nil {
				return
			}
			r.Feed(buf[:n])
			continue
		}
		p, err := packet.Decode(h, body, r.Version)
		if err != nil {
			return
		}
		switch p := p.(type) {
		case *packet.Connect:
			r.Version = p.Version
			c.write((&packet.Connack{}).AppendTo(nil, r.Version))
		case *packet.Subscribe:
			b.mu.Lock()
			b.subs = append(b.subs, c)
			b.mu.Unlock()
			c.write((&packet.Suback{PacketID: p.PacketID, Codes: []packet.ReasonCode{1}}).AppendTo(nil, r.Version))
		case *packet.Publish:
			b.forward(p, r.Version)
			c.write((&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID}).AppendTo(nil, r.Version))
		case *packet.Disconnect:
			return
		}
	}
}

func (b *lossyBroker) forward(p *packet.Publish, v packet.Version) {
	n := b.copies(binary.BigEndian.Uint32(p.Payload[12:]))
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, s := range b.subs {
		for range n {
			b.pid = max(b.pid+1, 1)
			out := (&packet.Publish{Topic: p.Topic, Payload: p.Payload, QoS: 1, PacketID: b.pid}).AppendTo(nil, v)
			if b.holdLast == 0 || i < len(b.subs)-1 {
				s.write(out)
				continue
			}
			if b.held = append(b.held, out); len(b.held) >= b.holdLast {
				for _, m := range b.held {
					s.write(m)
				}
				b.held = nil
			}
		}
	}
}

// every is copies for a broker that loses nothing.
func every(uint32) int { return 1 }

// TestLossSeenBehindDuplicate: a broker that loses one message and delivers another
// twice makes the count of deliveries come out right; the sequence numbers show both,
// and name the lost one.
func TestLossSeenBehindDuplicate(t *testing.T) {
	addr := startLossyBroker(t, func(seq uint32) int {
		switch seq {
		case 3:
			return 0
		case 5:
			return 2
		}
		return 1
	}, 0)
	o := &loadgen.Options{Mode: loadgen.ModeFanIn, Addr: addr, QoS: 1, Count: 10, Publishers: 1, Subscribers: 1}
	r, err := loadgen.Run(t.Context(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := r.Traffic
	if tr.Expected != 10 || tr.Received != 9 || tr.Lost != 1 || tr.Duplicates != 1 || tr.Acked != 10 {
		t.Fatalf("expected %d, received %d, lost %d, duplicates %d, acked %d; want 10, 9, 1, 1, 10",
			tr.Expected, tr.Received, tr.Lost, tr.Duplicates, tr.Acked)
	}
	want := "message 3 of publisher 0 (of 1 missing there; the publisher has 10 of 10 acknowledged)"
	if errs := strings.Join(r.Errors, "\n"); !strings.Contains(errs, want) {
		t.Fatalf("errors %q do not name the lost message: want %q", r.Errors, want)
	}
}

// TestClosedLoopWaitsForSlowest: the closed loop's window counts what the slowest
// subscriber has not received. One of 2 subscribers gets nothing until 5 messages wait
// for it; with a window of 4 the publisher stops at 4 and sends the 5th only after
// writing the window off (a stall). Counting deliveries over both subscribers, it let
// the second lag 8 behind: the 5th went at once.
func TestClosedLoopWaitsForSlowest(t *testing.T) {
	addr := startLossyBroker(t, every, 5)
	o := &loadgen.Options{Mode: loadgen.ModeFanIn, Addr: addr, QoS: 1, Count: 5, Publishers: 1, Subscribers: 2, Inflight: 4}
	r, err := loadgen.Run(t.Context(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr := r.Traffic; tr.Stalls != 1 || tr.Received != 10 || tr.Lost != 0 {
		t.Fatalf("stalls %d, received %d, lost %d; want 1, 10, 0", tr.Stalls, tr.Received, tr.Lost)
	}
}
