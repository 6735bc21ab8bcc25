package listener

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// dialIdle opens n client connections to l from spread source addresses, with a TLS
// handshake on tls and wss listeners and an upgrade on ws and wss listeners, and leaves
// them idle. Go's client conns, TLS ones included, park no goroutine.
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
				if err == nil && l.kind&kindSecure != 0 {
					tc := tls.Client(c, clientTLS())
					err = tc.Handshake()
					c = tc
				}
				if err == nil && l.kind&kindWeb != 0 {
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
// that the number of goroutines grows with them only by what the engine holds per idle
// connection (goroutinesPerConn: none on the epoll engine, the reader on the portable one).
func TestIdleGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 4,000 connections")
	}
	const n = 2000
	h := &counter{}
	s := newTestServer(t, h, Options{ConnectTimeout: time.Hour})
	lt, lw := listen(t, s, conf.ListenerTCP), listen(t, s, conf.ListenerWS)
	dialIdle(t, lt, 1) // warm up
	testenv.WaitFor(t, "the warm-up connection", func() bool { return h.open() == 1 })
	base := runtime.NumGoroutine()

	dialIdle(t, lt, n)
	dialIdle(t, lw, n)
	testenv.WaitFor(t, "every connection open", func() bool { return h.open() == 2*n+1 })
	if lt.Conns() != n+1 || lw.Conns() != n {
		t.Fatalf("Conns() = %d, %d", lt.Conns(), lw.Conns())
	}
	perConn := goroutinesPerConn * 2 * n
	var after int
	testenv.WaitFor(t, fmt.Sprintf("the goroutines to come within %d of the %d before %d idle connections", perConn+2, base, 2*n), func() bool {
		after = runtime.NumGoroutine() // transient ones may take a moment to end
		return after <= base+perConn+2
	})
	t.Logf("goroutines: %d before, %d with %d idle connections (%.4f per connection); %d of them ours",
		base, after, 2*n, float64(after-base)/float64(2*n), s.running.Load())
	want := 3 + engineGoroutines(s, 2*n+1) // two accept loops, the wheel, the engine's
	if got := s.running.Load(); got != want {
		t.Errorf("%d goroutines of ours, want %d", got, want)
	}
}

// TestIdleGoroutinesTLS opens 1,000 idle tls and 1,000 idle wss connections and checks that
// no goroutine stays with them but what the engine holds per idle connection: the
// handshake goroutines have all ended.
func TestIdleGoroutinesTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 TLS connections")
	}
	n := 1000
	if testenv.Race {
		n = 150 // handshakes are slow under the race detector; the count is what matters
	}
	h := &counter{}
	s := newTestServer(t, h, Options{ConnectTimeout: time.Hour})
	lt, lw := listen(t, s, conf.ListenerTLS), listen(t, s, conf.ListenerWSS)
	ours := func(conns int) int32 { // two accept loops, the wheel, the certificate watcher, the engine's
		return 4 + engineGoroutines(s, conns)
	}
	dialIdle(t, lt, 1)
	dialIdle(t, lw, 1)
	testenv.WaitFor(t, "the warm-up connections", func() bool { return h.open() == 2 })
	testenv.WaitFor(t, "the warm-up handshake goroutines to end", func() bool { return s.running.Load() == ours(2) })
	base := runtime.NumGoroutine()

	dialIdle(t, lt, n)
	dialIdle(t, lw, n)
	testenv.WaitFor(t, "every connection open", func() bool { return h.open() == 2*n+2 })
	if lt.Conns() != n+1 || lw.Conns() != n+1 {
		t.Fatalf("Conns() = %d, %d", lt.Conns(), lw.Conns())
	}
	testenv.WaitFor(t, "every handshake goroutine to end", func() bool { return s.running.Load() == ours(2*n+2) })
	perConn := goroutinesPerConn * 2 * n
	var after int
	testenv.WaitFor(t, fmt.Sprintf("the goroutines to come within %d of the %d before %d idle TLS connections", perConn, base, 2*n), func() bool {
		after = runtime.NumGoroutine() // transient ones may take a moment to end
		return after <= base+perConn
	})
	t.Logf("goroutines: %d before, %d with %d idle TLS connections (%d tls, %d wss); %d of them ours",
		base, after, 2*n, n, n, s.running.Load())
}
