//go:build linux && !bifrost_portable

package interop_test

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// idleConns is how many idle clients TestIdleConnections connects.
const idleConns = 2000

// idleGoroutineSlack is how many goroutines more than before the clients came the broker
// may run with all of them connected: a small constant, whatever the number of clients.
const idleGoroutineSlack = 20

// TestIdleConnections connects 2,000 MQTT clients that stay idle after their CONNACK (a
// quarter each of TCP and WebSocket in 3.1.1 and 5.0, from source addresses 127.0.0.2 to
// 127.0.0.9) and checks that the broker runs no goroutine per connection, as on the epoll
// engine (the portable engine, -tags bifrost_portable, runs one). It logs the live heap
// each idle connection costs the process.
//
// The clients are dialed with Go's net package, then reduced to a bare duplicate of their
// descriptor (the net.Conn is closed; the socket stays open), so that the heap measured is
// the broker's and not the clients'.
//
//	go test -run TestIdleConnections -v ./test/interop/
func TestIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if need := uint64(2*idleConns + 256); lim.Cur < need { // a descriptor at each end
		t.Skipf("RLIMIT_NOFILE is %d, %d needed for %d connections: skipped (raise it with ulimit -n)",
			lim.Cur, need, idleConns)
	}
	b := mqStart(t, func(c *bifrost.Config) {
		c.HTTP.Address = "off"
		c.Log.Level = "warn" // a log line per client would be heap growing with them
	})

	fds := make([]int, idleConns+1) // made before the baseline
	t.Cleanup(func() {
		for _, fd := range fds {
			if fd > 0 {
				// A reset: no TIME_WAIT left behind for the tests that follow.
				_ = syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1})
				_ = syscall.Close(fd)
			}
		}
	})
	// Warm up: the first connections of each kind may start helpers and fill pools.
	for i := range 4 {
		fd, err := idleDial(b, i, "warm-up")
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			fds[idleConns] = fd
		} else {
			_ = syscall.Close(fd)
		}
	}
	heap0, g0 := idleMeasure()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < idleConns; i += 8 {
				fd, err := idleDial(b, i, "idle")
				if err != nil {
					errs <- fmt.Errorf("client %d (%s): %w", i, idleMode(i), err)
					return
				}
				fds[i] = fd
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	// Goroutines started while clients connected (the runtime's) may take a moment to end:
	// the count must come down within the slack.
	var heap1 uint64
	var g1 int
	testenv.WaitFor(t, fmt.Sprintf("the goroutines to come back within %d of the %d before %d idle connections",
		idleGoroutineSlack, g0, idleConns), func() bool {
		heap1, g1 = idleMeasure()
		return g1 <= g0+idleGoroutineSlack
	})
	t.Logf("%d idle connections (TCP and WebSocket, 3.1.1 and 5.0) in %v: goroutines %d before, %d after; "+
		"live heap %.0f bytes per connection (%d → %d)",
		idleConns, elapsed.Round(time.Millisecond), g0, g1, float64(int64(heap1)-int64(heap0))/idleConns, heap0, heap1)
}

// idleMode names the transport and version of client i.
func idleMode(i int) string {
	return [...]string{"tcp/3.1.1", "tcp/5.0", "ws/3.1.1", "ws/5.0"}[i%4]
}

// idleDial connects client i (the transport and version idleMode says) from
// 127.0.0.(2+i%8), completes CONNECT/CONNACK, and returns a close-on-exec duplicate of the
// socket, having closed the net.Conn.
func idleDial(b *mqBroker, i int, prefix string) (int, error) {
	ws, v5 := i%4 >= 2, i%2 == 1
	addr := b.tcp
	if ws {
		addr = b.ws
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}, Timeout: testenv.Timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := mqHandshake(c, ws, v5, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
		return 0, err
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	fd := -1
	if cerr := rc.Control(func(s uintptr) {
		var r uintptr
		var errno syscall.Errno
		r, _, errno = syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			err = errno
			return
		}
		fd = int(r)
	}); cerr != nil {
		return 0, cerr
	}
	return fd, err
}

// idleMeasure returns the live heap, after the garbage and the pools' spare objects are
// gone, and the number of goroutines.
func idleMeasure() (heap uint64, goroutines int) {
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, runtime.NumGoroutine()
}
