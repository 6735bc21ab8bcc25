package listener

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestTLSHandshakeCap floods a tls listener with connections that say nothing, that send
// half a ClientHello, and that send a whole one and stop (each of those holds a handshake
// until the connect timeout): handshake goroutines never exceed Options.MaxTLSHandshakes,
// the connections beyond the slots wait in a queue of 4 times as many, the rest are
// refused and counted; a healthy client queued behind the slots gets its handshake as soon
// as one frees, and everything is given back once the flood goes.
func TestTLSHandshakeCap(t *testing.T) {
	const (
		slots   = 4
		queue   = tlsQueueFactor * slots
		silent  = 300
		halves  = 100
		stalled = 60
	)
	r := newRecorder(t)
	r.echo = true
	s := newTestServer(t, r, Options{ConnectTimeout: time.Hour, MaxTLSHandshakes: slots})
	l := listen(t, s, conf.ListenerTLS)
	hello := clientHello(t)
	base := sharedGoroutines(t, s) // accept loop, wheel, certificate watcher
	g0 := runtime.NumGoroutine()

	dialN := func(n int, send []byte) []net.Conn {
		cs := make([]net.Conn, n)
		for i := range cs {
			d := net.Dialer{LocalAddr: sourceAddr(i)}
			c, err := d.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if _, err := c.Write(send); err != nil {
				t.Fatal(err)
			}
			cs[i] = c
		}
		return cs
	}
	stats := func() (running, waiting int, refused uint64) { return s.TLSHandshakes() }
	bounded := func(what string) {
		t.Helper()
		running, waiting, refused := stats()
		if ours := sharedGoroutines(t, s); running > slots || ours > base+slots {
			t.Fatalf("%s: %d handshakes running, %d goroutines of ours beyond the %d before; cap %d",
				what, running, ours-base, base, slots)
		}
		// +2: the healthy client's goroutine, slack; the engine's per connection apart.
		if g := runtime.NumGoroutine() - int(connGoroutines(t)); g > g0+slots+2 {
			t.Fatalf("%s: %d goroutines, %d before the flood: more than the %d handshake slots", what, g, g0, slots)
		}
		t.Logf("%s: %d running, %d waiting, %d refused, %d goroutines (%d of them one per connection; %d before)",
			what, running, waiting, refused, runtime.NumGoroutine(), connGoroutines(t), g0)
	}

	dialN(silent, nil)
	dialN(halves, hello[:len(hello)/2])
	first := dialN(slots, hello)
	testenv.WaitFor(t, "every slot taken", func() bool { running, _, _ := stats(); return running == slots })

	// A healthy client now waits for a slot, first in the queue.
	type result struct {
		c   *tls.Conn
		err error
	}
	healthy := make(chan result, 1)
	raw := dialTCP(t, l)
	go func() {
		c := tls.Client(raw, clientTLS())
		healthy <- result{c, c.Handshake()}
	}()
	testenv.WaitFor(t, "the healthy client to wait", func() bool { _, waiting, _ := stats(); return waiting == 1 })

	rest := dialN(stalled-slots, hello)
	testenv.WaitFor(t, "the queue to fill and the rest to be refused", func() bool {
		_, waiting, refused := stats()
		return waiting == queue && refused == stalled-slots-(queue-1)
	})
	bounded("flood")
	// The refused ones are closed by the server; the waiting ones hear nothing. (Which are
	// which depends on the order the engine reads them in.)
	var closed sync.WaitGroup
	var mu sync.Mutex
	ended := 0
	deadline := time.Now().Add(2 * time.Second)
	for _, c := range rest {
		closed.Go(func() {
			_ = c.SetReadDeadline(deadline)
			_, err := io.ReadAll(c)
			var ne net.Error
			if err == nil || errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &ne) || !ne.Timeout() {
				mu.Lock()
				ended++
				mu.Unlock()
			}
			_ = c.SetReadDeadline(time.Time{})
		})
	}
	closed.Wait()
	if want := stalled - slots - (queue - 1); ended != want {
		t.Fatalf("%d stalled clients saw their connection closed, want the %d refused", ended, want)
	}
	select {
	case res := <-healthy:
		t.Fatalf("the healthy client's handshake ended (%v) while every slot was taken", res.err)
	default:
	}

	// One stalled client goes: its slot passes to the first in the queue.
	_ = first[0].Close()
	res := recv(t, healthy, "the healthy client's handshake")
	if res.err != nil {
		t.Fatalf("healthy client: %v", res.err)
	}
	defer res.c.Close()
	recv(t, r.opened, "OnOpen")
	if _, err := res.c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(res.c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	bounded("healthy client served")

	// The flood goes: the waiting ones get their turn, fail, and every goroutine ends.
	var wg sync.WaitGroup
	for _, c := range append(first[1:], rest...) {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
	testenv.WaitFor(t, "the handshake goroutines to end", func() bool {
		running, waiting, _ := stats()
		return running == 0 && waiting == 0 && sharedGoroutines(t, s) == base
	})
	_, _, refused := stats()
	t.Logf("after the flood: no handshake running or waiting, %d refused in all", refused)
}

// TestTLSGateSweep: when the queue is full, waiting connections that have closed are swept
// out before a newcomer is refused.
func TestTLSGateSweep(t *testing.T) {
	g := newTLSGate(1)
	if g.admit(&tlsConn{}) != gateRun {
		t.Fatal("the first connection did not get the slot")
	}
	waiting := make([]*tlsConn, g.maxQueue)
	for i := range waiting {
		waiting[i] = &tlsConn{}
		if v := g.admit(waiting[i]); v != gateWait {
			t.Fatalf("connection %d: verdict %d, want to wait", i, v)
		}
	}
	if g.admit(&tlsConn{}) != gateRefuse {
		t.Fatal("a connection beyond the queue was not refused")
	}
	waiting[1].state.Or(stClosed)
	if g.admit(&tlsConn{}) != gateWait {
		t.Fatal("a closed waiting connection kept its place in the queue")
	}
	if running, n, refused := g.stats(); running != 1 || n != g.maxQueue || refused != 1 {
		t.Fatalf("stats %d running, %d waiting, %d refused; want 1, %d, 1", running, n, refused, g.maxQueue)
	}
}
