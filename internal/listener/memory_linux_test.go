package listener

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
)

// TestIdleMemory measures what an idle connection costs the server: live heap bytes and
// goroutines per connection, for TCP and for WebSocket, with as many connections as the
// open-file limit allows (up to 9,000: client and server sockets both count). The clients
// are bare sockets made with system calls, so that they add nothing to the heap measured.
//
//	go test -run TestIdleMemory -v ./internal/listener/
func TestIdleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of connections")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	n := min(9000, (int(lim.Cur)-512)/2)
	if n < 1000 {
		t.Skipf("RLIMIT_NOFILE is %d: too low to measure (two descriptors per connection)", lim.Cur)
	}
	for _, typ := range []string{conf.ListenerTCP, conf.ListenerWS} {
		t.Run(typ, func(t *testing.T) {
			h := &counter{}
			s := newTestServer(t, h, Options{ConnectTimeout: time.Hour})
			l := listen(t, s, typ)
			fds := make([]int, n) // allocated before the baseline
			rawDialIdle(t, l, fds[:1])
			waitFor(t, "the warm-up connection", func() bool { return h.open() == 1 })
			heap0, g0 := measure()

			rawDialIdle(t, l, fds[1:])
			waitFor(t, fmt.Sprintf("%d connections", n), func() bool { return h.open() == n })
			heap1, g1 := measure()
			per := float64(heap1-heap0) / float64(n-1)
			t.Logf("%s: %d idle connections: %.0f heap bytes and %.4f goroutines per connection",
				typ, n-1, per, float64(g1-g0)/float64(n-1))
			limit := map[string]float64{conf.ListenerTCP: 600, conf.ListenerWS: 1300}[typ]
			if per > limit {
				t.Errorf("%s: %.0f bytes per idle connection, want at most %.0f", typ, per, limit)
			}
			if g1-g0 > 2 {
				t.Errorf("%s: %d goroutines more with %d idle connections", typ, g1-g0, n-1)
			}

			for _, fd := range fds {
				_ = syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1})
				_ = syscall.Close(fd) // a reset: no TIME_WAIT left behind
			}
			waitFor(t, "every connection closed", func() bool { return h.open() == 0 && l.Conns() == 0 })
			_ = s.Close() // its descriptors are gone before the next transport's test
		})
	}
}

// measure returns the live heap and the number of goroutines, after the garbage and the
// pools' spare buffers are gone.
func measure() (heap uint64, goroutines int) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	time.Sleep(20 * time.Millisecond) // transient goroutines (nbio's close queue) exit
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}

// rawDialIdle fills fds with connected client sockets (upgraded on a ws listener) made
// with system calls only.
func rawDialIdle(t testing.TB, l *Listener, fds []int) {
	t.Helper()
	port := l.Addr().(*net.TCPAddr).Port
	req := []byte("GET /mqtt HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(fds); i += workers {
				fd, err := rawDial(port, sourceAddr(len(fds)+i).IP)
				if err == nil && l.kind == kindWS {
					err = rawHandshake(fd, req)
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				fds[i] = fd
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("dialing: %v", firstErr)
	}
}

func rawDial(port int, src net.IP) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte(src.To4())}); err != nil {
		_ = syscall.Close(fd)
		return 0, err
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return 0, err
	}
	return fd, nil
}

func rawHandshake(fd int, req []byte) error {
	if _, err := syscall.Write(fd, req); err != nil {
		return err
	}
	var buf [1024]byte
	n := 0
	for !bytes.Contains(buf[:n], []byte("\r\n\r\n")) {
		k, err := syscall.Read(fd, buf[n:])
		if err != nil {
			return err
		}
		if k == 0 {
			return fmt.Errorf("handshake: EOF after %q", buf[:n])
		}
		n += k
	}
	if !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 101 ")) {
		return fmt.Errorf("handshake: %q", buf[:n])
	}
	return nil
}
