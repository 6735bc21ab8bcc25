//go:build linux && !bifrost_portable

package hostile

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// peerEnv tells a re-executed test binary to act as the half-open peer (TestHalfOpenPeer).
const peerEnv = "BIFROST_HOSTILE_PEER"

// TestHalfOpen opens 10,000 connections (5,000 with BIFROST_CI=1) that never complete a
// CONNECT: half send nothing at all, half the first bytes of one. The broker must close
// every one after mqtt.connect_timeout, hold them meanwhile without a goroutine each, and
// serve the healthy client throughout. Those are the epoll engine's properties: the
// portable engine (-tags bifrost_portable) holds a goroutine per connection, and the Go
// runtime keeps a goroutine's record (about 500 bytes of heap) for reuse after it ends.
//
// The client ends live in a child process (this test binary, re-executed as
// TestHalfOpenPeer): both ends in one process would need two descriptors per connection,
// beyond the 20,000 a process may hold here.
func TestHalfOpen(t *testing.T) {
	n := 10000
	if testenv.CI() {
		n = 5000
	}
	e := start(t, nil)
	h := e.healthy(t)
	heap0, g0 := liveHeap(), runtime.NumGoroutine()

	cmd := exec.Command(os.Args[0], "-test.run=^TestHalfOpenPeer$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d", peerEnv, e.addr, n, connectTimeout.Milliseconds()))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "peer: "); ok {
				lines <- l
			}
		}
		close(lines)
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill() // only the child this test started, by its pid
		}
		<-exited
	})
	line := func() []string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				<-exited
				t.Fatalf("the peer process ended early: %v", waitErr)
			}
			return strings.Fields(l)
		case <-time.After(120 * time.Second):
			t.Fatal("the peer process said nothing for 2 minutes")
		}
		return nil
	}

	// dialed N open M: every connection is established, M of them still open.
	f := line()
	// The broker accepts them a little after the kernel did: wait until it holds them all,
	// or (if the first ones time out meanwhile) until the count stops growing.
	open, grew := 0, time.Now()
	for open < n && time.Since(grew) < 500*time.Millisecond {
		if c := e.conns(t) - 1; c > open { // the healthy client's is not the attacker's
			open, grew = c, time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	heap, g := liveHeap(), runtime.NumGoroutine()
	t.Logf("peer: %s", strings.Join(f, " "))
	per := int64(0)
	if open > 0 {
		per = (int64(heap) - int64(heap0)) / int64(open)
	}
	t.Logf("broker holds %d half-open connections: heap %+d bytes (%d per connection), %+d goroutines",
		open, int64(heap)-int64(heap0), per, g-g0)
	if g-g0 > 64 {
		t.Errorf("%d goroutines more with %d half-open connections: one per connection?", g-g0, open)
	}
	if open > 1000 && per > 8<<10 {
		t.Errorf("%d bytes of heap per half-open connection", per)
	}
	h.check(t)

	// closed K of N, lifetimes min p50 max (ms), early E: how the broker ended them.
	f = line()
	t.Logf("peer: %s", strings.Join(f, " "))
	closed, _ := strconv.Atoi(f[1])
	early, _ := strconv.Atoi(f[len(f)-1])
	if closed != n {
		t.Errorf("the broker closed %d of %d half-open connections", closed, n)
	}
	if early != 0 {
		t.Errorf("%d connections closed before the connect timeout of %v", early, connectTimeout)
	}
	<-exited
	if waitErr != nil {
		t.Errorf("peer process: %v", waitErr)
	}
	testenv.WaitFor(t, "the broker to hold only the healthy connection", func() bool { return e.conns(t) == 1 })
	h.check(t)
	testenv.WaitFor(t, "the heap to come back", func() bool { return int64(liveHeap())-int64(heap0) < 2<<20 })
}

// TestHalfOpenPeer is the client side of TestHalfOpen, run in a child process: it dials
// the connections, reports, waits for the broker to close each, reports how long each
// lived. It does nothing when run by go test directly.
func TestHalfOpenPeer(t *testing.T) {
	spec := os.Getenv(peerEnv)
	if spec == "" {
		t.Skip("run by TestHalfOpen in a child process")
	}
	parts := strings.Split(spec, ",")
	n, _ := strconv.Atoi(parts[1])
	timeoutMs, _ := strconv.Atoi(parts[2])
	addr, err := net.ResolveTCPAddr("tcp4", parts[0])
	if err != nil {
		t.Fatal(err)
	}
	partial := connectBytes(packet.V311, "half-open", nil)[:7]

	// Raw descriptors, no net.Conn: nothing in this process reads them behind our back,
	// and a sweep with MSG_DONTWAIT tells which ones the broker closed.
	fds := make([]int, n)
	dialed := make([]time.Time, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				fd, err := dialRaw(addr, i)
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				fds[i], dialed[i] = fd, time.Now()
				if i%2 == 1 {
					if _, err := syscall.Write(fd, partial); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lifetimes := make([]time.Duration, 0, n)
	open := make([]int, 0, n)
	sweep := func() {
		keep := open[:0]
		buf := make([]byte, 64)
		for _, i := range open {
			_, _, err := syscall.Recvfrom(fds[i], buf, syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) {
				keep = append(keep, i)
				continue
			}
			lifetimes = append(lifetimes, time.Since(dialed[i])) // EOF, or a reset
			_ = syscall.Close(fds[i])
		}
		open = keep
	}
	for i := range n {
		open = append(open, i)
	}
	sweep()
	fmt.Printf("peer: dialed %d open %d in %v\n", n, len(open), time.Since(dialed[0]).Round(time.Millisecond))
	deadline := time.Now().Add(time.Duration(timeoutMs)*time.Millisecond + 60*time.Second)
	for len(open) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		sweep()
	}
	for _, i := range open {
		_ = syscall.Close(fds[i])
	}
	slices.Sort(lifetimes)
	early := 0
	for _, d := range lifetimes {
		if d < time.Duration(timeoutMs-300)*time.Millisecond {
			early++
		}
	}
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	if len(lifetimes) == 0 {
		lifetimes = append(lifetimes, 0)
	}
	fmt.Printf("peer: closed %d of %d, lifetimes min %d p50 %d max %d ms, early %d\n", n-len(open), n,
		ms(lifetimes[0]), ms(lifetimes[len(lifetimes)/2]), ms(lifetimes[len(lifetimes)-1]), early)
}

// dialRaw connects a blocking socket to addr from source address 127.0.0.(2+i%8), so that
// the connections spread over eight times the ephemeral ports, and makes it non-blocking.
func dialRaw(addr *net.TCPAddr, i int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	src := &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, byte(2 + i%8)}}
	dst := &syscall.SockaddrInet4{Port: addr.Port}
	copy(dst.Addr[:], addr.IP.To4())
	if err := syscall.Bind(fd, src); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	for {
		err = syscall.Connect(fd, dst)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}
