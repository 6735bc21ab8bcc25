package listener

import (
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
)

// dialIdle opens n client connections to l from spread source addresses, upgrading them
// when l is a ws listener, and leaves them idle. Go's client conns park no goroutine.
func dialIdle(t testing.TB, l *Listener, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				d := net.Dialer{LocalAddr: sourceAddr(i)}
				c, err := d.Dial("tcp", l.Addr().String())
				if err == nil && l.kind == kindWS {
					var res *http.Response
					if _, res, err = wsHandshake(c, "/mqtt", "mqtt"); err == nil && res.StatusCode != http.StatusSwitchingProtocols {
						err = &net.AddrError{Err: res.Status}
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	if firstErr != nil {
		t.Fatalf("dialing: %v", firstErr)
	}
	return conns
}

// TestIdleGoroutines opens 2,000 idle TCP and 2,000 idle WebSocket connections and checks
// that the number of goroutines does not grow with them.
func TestIdleGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 4,000 connections")
	}
	const n = 2000
	h := &counter{}
	s := newTestServer(t, h, Options{ConnectTimeout: time.Hour})
	lt, lw := listen(t, s, conf.ListenerTCP), listen(t, s, conf.ListenerWS)
	dialIdle(t, lt, 1) // warm up: the first connection may start nbio's helper goroutine
	waitFor(t, "the warm-up connection", func() bool { return h.open() == 1 })
	settle := func() int { // goroutines once transient ones (nbio's close queue) are gone
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	base := settle()

	dialIdle(t, lt, n)
	dialIdle(t, lw, n)
	waitFor(t, "every connection open", func() bool { return h.open() == 2*n+1 })
	if lt.Conns() != n+1 || lw.Conns() != n {
		t.Fatalf("Conns() = %d, %d", lt.Conns(), lw.Conns())
	}
	after := settle()
	for deadline := time.Now().Add(waitTimeout); after > base+2 && time.Now().Before(deadline); {
		after = settle()
	}
	if after > base+2 {
		t.Errorf("goroutines: %d before, %d with %d idle connections", base, after, 2*n)
	}
	t.Logf("goroutines: %d before, %d with %d idle connections (%.4f per connection); %d of them ours",
		base, after, 2*n, float64(after-base)/float64(2*n), s.running.Load())
	if got := s.running.Load(); got != 3 { // two accept loops and the wheel
		t.Errorf("%d goroutines of ours, want 3", got)
	}
}
