//go:build !bifrost_portable

package listener_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// The slow consumer's traffic: messages of about 1 KiB (the unit of the README's
// threshold), sent for slowFor at slowRate messages a second, read at half that rate.
const (
	slowPayload = 1000
	slowRate    = 200 // messages a second, all QoS together
	slowFor     = 10 * time.Second
	slowRead    = slowRate * (slowPayload + 16) / 2 // bytes a second
	slowWait    = 15 * time.Second                  // bounds every wait for a condition
)

// TestSlowConsumer: a subscriber that reads, but at half the rate it is sent to, for
// slowFor, through the broker on a real TCP listener; its socket's receive buffer is
// small, and so is the server's send buffer (loopback would grow it to megabytes before
// anything is queued). The README's delivery policy bounds what waits for it: at most
// queue.online_messages × 1 KiB (at least 64 KiB) in its connection, QoS 0 beyond that
// shed, QoS 1 waiting in its session's queue and going out as the connection drains.
// Checked, all along: the connection's queue (Buffered, the figure the broker holds back
// by, and the capacity of the buffer that holds it) stays within that threshold, though
// with QoS 0 flowing it never empties; QoS 1 keeps flowing beside QoS 0 (the drain notice
// comes while the queue is not empty); every QoS 1 message arrives, in order, and QoS 0
// in order. Once the traffic stops and the subscriber has read everything, its connection
// holds no buffer.
func TestSlowConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for more than 10 seconds")
	}
	// The cases run at the same time, whatever -parallel says: they wait, mostly.
	var cases sync.WaitGroup
	for _, tc := range []struct {
		name       string
		qos0, qos1 int // messages a second
	}{
		{"qos0", slowRate, 0},
		{"qos1", 0, slowRate},
		{"qos0+qos1", slowRate, slowRate / 40}, // QoS 0 alone keeps the queue from emptying
	} {
		cases.Go(func() { t.Run(tc.name, func(t *testing.T) { slowConsumer(t, tc.qos0, tc.qos1) }) })
	}
	cases.Wait()
}

func slowConsumer(t *testing.T, qos0, qos1 int) {
	cfg := conf.Default()
	cfg.Listeners = []conf.Listener{{Name: "tcp", Type: conf.ListenerTCP, Address: "127.0.0.1:0"}}
	cfg.SysInterval = new(conf.Duration)
	cfg.Queue.OfflineMessages = 2 * qos1 * int(slowFor/time.Second) // none refused: all must arrive
	cfg.EnsureDefaults()
	b, err := broker.New(broker.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	l := b.Listeners()[0]
	threshold := max(cfg.Queue.OnlineMessages*1024, 64<<10) // README "Delivery policy"

	sub := dialSlow(t, l.Addr().String())
	var conn listener.Conn
	waitUntil(t, "the subscriber's connection", func() bool {
		cs := listener.ConnsOf(l)
		if len(cs) == 1 {
			conn = cs[0]
		}
		return conn != nil
	})
	if err := listener.SetSendBuffer(conn, 8<<10); err != nil {
		t.Fatal(err)
	}
	go sub.read()

	// Sample the connection's queue while the traffic lasts.
	stop := make(chan struct{})
	var samples sync.WaitGroup
	var maxQueued, maxCap, nonEmpty, taken int
	samples.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			q, c := listener.WriteQueue(conn)
			maxQueued, maxCap = max(maxQueued, q), max(maxCap, c)
			taken++
			if q > 0 {
				nonEmpty++
			}
		}
	})

	// Publish at a steady rate; a message carries its QoS and number.
	start := time.Now()
	sent := [2]int{}
	tick := time.NewTicker(10 * time.Millisecond)
	payload := make([]byte, slowPayload)
	for elapsed := time.Duration(0); elapsed < slowFor; elapsed = time.Since(start) {
		<-tick.C
		for q, rate := range [2]int{qos0, qos1} {
			for sent[q] < rate*int(elapsed/time.Millisecond)/1000 {
				payload[0] = byte(q)
				binary.BigEndian.PutUint32(payload[1:], uint32(sent[q]))
				if err := b.Publish("slow/t", payload, byte(q), false); err != nil {
					t.Fatal(err)
				}
				sent[q]++
			}
		}
	}
	tick.Stop()
	close(stop)
	samples.Wait()
	sub.hurry()
	t.Logf("sent %d QoS 0 and %d QoS 1 messages in %v; the queue: at most %d bytes in a buffer of %d, not empty in %d of %d samples",
		sent[0], sent[1], slowFor, maxQueued, maxCap, nonEmpty, taken)

	if qos0 > 0 && nonEmpty < taken*3/4 {
		t.Errorf("the queue was empty in %d of %d samples: the subscriber kept up, so this tests nothing", taken-nonEmpty, taken)
	}
	// The threshold, passed by the messages written at once that crossed it.
	if limit := threshold + 4*(slowPayload+16); maxQueued > limit {
		t.Errorf("%d bytes queued in the connection, over the threshold %d", maxQueued, limit)
	}
	// A pooled buffer (a power of 4) that holds the threshold twice over: room to append
	// behind unsent bytes without moving them every time.
	if limit := 4 * threshold; maxCap > limit {
		t.Errorf("the queue's buffer grew to %d bytes, over %d for %d bytes queued at most", maxCap, limit, maxQueued)
	}

	if qos1 > 0 {
		waitUntil(t, "every QoS 1 message", func() bool { return sub.count(1) == sent[1] || sub.failed() != nil })
		// QoS 1 flowed all along: every 2 seconds brought at least a quarter of what was
		// sent meanwhile, though the subscriber read at half the rate sent in all.
		per := sub.perWindow(1, start, 2*time.Second)
		t.Logf("messages received every 2 s: QoS 1 %v, QoS 0 %v", per, sub.perWindow(0, start, 2*time.Second))
		for i, n := range per {
			if n < 2*qos1/4 {
				t.Errorf("QoS 1 messages received every 2 s: %v; %d in seconds %d-%d", per, n, 2*i, 2*i+2)
				break
			}
		}
	}
	if qos0 > 0 {
		waitUntil(t, "the queue to drain", func() bool { q, _ := listener.WriteQueue(conn); return q == 0 })
		if got := sub.count(0); got == 0 || got == sent[0] {
			t.Errorf("%d of %d QoS 0 messages arrived: want some shed, and some delivered", got, sent[0])
		}
	}
	if err := sub.failed(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the idle connection to hold no buffer", func() bool {
		q, c := listener.WriteQueue(conn)
		return q == 0 && c == 0
	})
}

// slowSub is an MQTT 3.1.1 subscriber on a raw socket that reads at slowRead bytes a
// second (until hurry), acknowledges QoS 1, and checks the order of what it receives.
type slowSub struct {
	c net.Conn
	r *bufio.Reader

	mu    sync.Mutex
	fast  bool
	got   [2][]time.Time // arrival of each message, by QoS
	next  [2]int         // the number the next message of each QoS may have, at least
	err   error
	avail float64 // bytes the rate allows to read now
	last  time.Time
}

// dialSlow connects with a small receive buffer, and subscribes to slow/t at QoS 1.
func dialSlow(t *testing.T, addr string) *slowSub {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		_ = rc.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		})
		return err
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := &slowSub{c: c, fast: true, last: time.Now()}
	s.r = bufio.NewReaderSize(s, 4096)
	_ = c.SetDeadline(time.Now().Add(slowWait))
	connect := (&packet.Connect{Version: packet.V311, CleanStart: true, ClientID: []byte("slow")}).AppendTo(nil, packet.V311)
	subscribe := (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("slow/t"), QoS: 1}}}).AppendTo(nil, packet.V311)
	if _, err := c.Write(append(connect, subscribe...)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []packet.Type{packet.CONNACK, packet.SUBACK} {
		typ, _, err := s.packet()
		if err != nil || typ>>4 != byte(want) {
			t.Fatalf("waiting for %v: packet type %d, %v", want, typ>>4, err)
		}
	}
	_ = c.SetDeadline(time.Time{})
	s.mu.Lock()
	s.fast = false
	s.mu.Unlock()
	return s
}

// Read reads what the rate allows, waiting for it: the throttle of a slow subscriber.
func (s *slowSub) Read(p []byte) (int, error) {
	for {
		s.mu.Lock()
		now := time.Now()
		s.avail = min(s.avail+now.Sub(s.last).Seconds()*slowRead, 2<<10)
		s.last = now
		n := len(p)
		if !s.fast {
			n = min(n, int(s.avail))
		}
		s.mu.Unlock()
		if n > 0 {
			k, err := s.c.Read(p[:n])
			s.mu.Lock()
			s.avail -= float64(k)
			s.mu.Unlock()
			return k, err
		}
		time.Sleep(2 * time.Millisecond) // the pace of the reader, not a wait for an event
	}
}

// hurry lets the subscriber read as fast as it can.
func (s *slowSub) hurry() {
	s.mu.Lock()
	s.fast = true
	s.mu.Unlock()
}

// packet reads one packet: its first byte and body.
func (s *slowSub) packet() (byte, []byte, error) {
	first, err := s.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, shift := 0, 0
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			break
		}
		shift += 7
	}
	body := make([]byte, n)
	_, err = io.ReadFull(s.r, body)
	return first, body, err
}

// read receives PUBLISHes until the connection ends, acknowledging QoS 1.
func (s *slowSub) read() {
	for {
		first, body, err := s.packet()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.fail(err)
			}
			return
		}
		var p packet.Publish
		h := packet.Header{Type: packet.Type(first >> 4), Flags: first & 0x0f, Remaining: len(body)}
		if h.Type != packet.PUBLISH {
			s.fail(fmt.Errorf("packet type %d, want PUBLISH", h.Type))
			return
		}
		if err := p.Decode(h, body, packet.V311); err != nil {
			s.fail(err)
			return
		}
		if p.QoS == 1 {
			ack := (&packet.Ack{PacketType: packet.PUBACK, PacketID: p.PacketID}).AppendTo(nil, packet.V311)
			if _, err := s.c.Write(ack); err != nil {
				s.fail(err)
				return
			}
		}
		q, n := int(p.Payload[0]), int(binary.BigEndian.Uint32(p.Payload[1:]))
		s.mu.Lock()
		switch {
		case p.QoS != byte(q):
			s.failLocked(fmt.Errorf("message %d of QoS %d came at QoS %d", n, q, p.QoS))
		case n < s.next[q] || q == 1 && n != s.next[q]:
			s.failLocked(fmt.Errorf("QoS %d message %d after %d", q, n, s.next[q]-1))
		}
		s.next[q] = n + 1
		s.got[q] = append(s.got[q], time.Now())
		s.mu.Unlock()
	}
}

func (s *slowSub) fail(err error) {
	s.mu.Lock()
	s.failLocked(err)
	s.mu.Unlock()
}

func (s *slowSub) failLocked(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *slowSub) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// count returns how many messages of QoS q arrived.
func (s *slowSub) count(q int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got[q])
}

// perWindow counts the messages of QoS q that arrived in each window w of slowFor from
// start.
func (s *slowSub) perWindow(q int, start time.Time, w time.Duration) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	per := make([]int, int(slowFor/w))
	for _, at := range s.got[q] {
		if i := int(at.Sub(start) / w); i < len(per) {
			per[i]++
		}
	}
	return per
}

// waitUntil polls cond until it holds, failing the test after slowWait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(slowWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
