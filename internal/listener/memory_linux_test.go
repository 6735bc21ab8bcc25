package listener

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestIdleMemory measures what an idle connection costs the server: live heap bytes, stack
// bytes and goroutines per connection, for TCP and for WebSocket, with as many connections
// as the open-file limit allows (up to 9,000: client and server sockets both count). The
// clients are bare sockets made with system calls, so that they add nothing to the heap
// measured. The heap is checked against the engine's budget where it has one
// (idleHeapBudget), the goroutines against goroutinesPerConn.
//
//	go test -run TestIdleMemory -v ./internal/listener/
//	go test -tags bifrost_portable -run TestIdleMemory -v ./internal/listener/
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
			testenv.WaitFor(t, "the warm-up connection", func() bool { return h.open() == 1 })
			heap0, stack0, g0 := measure()

			rawDialIdle(t, l, fds[1:])
			testenv.WaitFor(t, fmt.Sprintf("%d connections", n), func() bool { return h.open() == n })
			heap1, stack1, g1 := measure()
			per := float64(heap1-heap0) / float64(n-1)
			t.Logf("%s: %d idle connections: %.0f heap bytes, %.0f stack bytes and %.4f goroutines per connection",
				typ, n-1, per, float64(stack1-stack0)/float64(n-1), float64(g1-g0)/float64(n-1))
			if limit, gated := idleHeapBudget(typ); gated && per > limit {
				t.Errorf("%s: %.0f bytes per idle connection, want at most %.0f", typ, per, limit)
			}
			if extra := g1 - g0 - goroutinesPerConn*(n-1); extra > 2 {
				t.Errorf("%s: %d goroutines more with %d idle connections, want at most %d",
					typ, g1-g0, n-1, goroutinesPerConn*(n-1)+2)
			}

			for _, fd := range fds {
				_ = syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1})
				_ = syscall.Close(fd) // a reset: no TIME_WAIT left behind
			}
			testenv.WaitFor(t, "every connection closed", func() bool { return h.open() == 0 && l.Conns() == 0 })
			_ = s.Close() // its descriptors are gone before the next transport's test
		})
	}
}

// measure returns the live heap, the goroutine stacks and the number of goroutines, after
// the garbage and the pools' spare buffers are gone.
func measure() (heap, stack uint64, goroutines int) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
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

// Environment of the client process of TestIdleMemoryTLS.
const (
	envTLSClients = "BIFROST_TEST_TLS_CLIENTS" // "addr n wss ca-file"
)

// TestIdleMemoryTLS measures what an idle TLS connection costs the server, for tls and
// wss: live heap, stack and resident memory (RSS) per connection, and goroutines, with up to
// 5,000 connections (the open-file limit permitting). The clients run in a child process
// (this test binary, TestTLSClientProcess), so that their TLS state is not in the heap
// measured. Each client completes its handshake (on wss, the upgrade too) and sends one
// small message, as an MQTT client sends its CONNECT, then stays idle.
//
//	go test -run TestIdleMemoryTLS -v ./internal/listener/
func TestIdleMemoryTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("opens thousands of TLS connections")
	}
	if testenv.Race {
		t.Skip("measures memory: the race detector distorts it (TestIdleGoroutinesTLS counts goroutines under it)")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	n := min(5000, int(lim.Cur)-512) // the clients' descriptors are in the other process
	if n < 2000 {
		t.Skipf("RLIMIT_NOFILE is %d: too low to measure", lim.Cur)
	}
	for _, typ := range []string{conf.ListenerTLS, conf.ListenerWSS} {
		t.Run(typ, func(t *testing.T) {
			h := &counter{}
			s := newTestServer(t, h, Options{ConnectTimeout: time.Hour})
			l := listen(t, s, typ)
			clients := startTLSClients(t, l, n)
			clients.await("warm")
			testenv.WaitFor(t, "the warm-up connection", func() bool { return h.open() == 1 })
			ours := func(conns int) int32 { // the accept loop, the wheel, the certificate watcher, the engine's
				return 3 + engineGoroutines(s, conns)
			}
			testenv.WaitFor(t, "its handshake goroutine to end", func() bool { return s.running.Load() == ours(1) })
			heap0, stack0, g0 := measure()
			rss0 := rss(t)

			clients.send("go")
			clients.await("ready")
			testenv.WaitFor(t, fmt.Sprintf("%d connections", n), func() bool { return h.open() == n })
			testenv.WaitFor(t, "the handshake goroutines to end", func() bool { return s.running.Load() == ours(n) })
			heap1, stack1, g1 := measure()
			rss1 := rss(t)
			per := float64(heap1-heap0) / float64(n-1)
			perRSS := float64(rss1-rss0) / float64(n-1)
			t.Logf("%s: %d idle connections: %.0f heap bytes, %.0f stack bytes, %.0f RSS bytes and %.4f goroutines per connection",
				typ, n-1, per, float64(stack1-stack0)/float64(n-1), perRSS, float64(g1-g0)/float64(n-1))
			if limit, gated := idleHeapBudget(typ); gated && per > limit {
				t.Errorf("%s: %.0f heap bytes per idle connection, want at most %.0f", typ, per, limit)
			}
			if want := g0 + goroutinesPerConn*(n-1); g1 != want {
				t.Errorf("%s: %d goroutines before, %d with %d idle connections, want %d", typ, g0, g1, n-1, want)
			}
			clients.stop()
			testenv.WaitFor(t, "every connection closed", func() bool { return h.open() == 0 && l.Conns() == 0 })
			_ = s.Close()
		})
	}
}

// rss returns the resident memory of this process, after returning what the heap does
// not use to the operating system.
func rss(t testing.TB) int64 {
	t.Helper()
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		t.Fatal(err)
	}
	return resident * int64(os.Getpagesize())
}

// tlsClients is the client process of TestIdleMemoryTLS.
type tlsClients struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// startTLSClients starts the client process: it makes one connection to l, says "warm",
// and on "go" makes n-1 more and says "ready"; it closes them all when its input closes.
func startTLSClients(t testing.TB, l *Listener, n int) *tlsClients {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTLSClientProcess$", "-test.count=1")
	ca := writeFile(t, t.TempDir(), "ca.pem", testPKI().ca.pem) // the child's own PKI differs
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %v %s", envTLSClients, l.Addr(), n, l.kind&kindWeb != 0, ca))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &tlsClients{t: t, cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = c.in.Close()
		_ = c.cmd.Process.Kill() // no-op once it has exited
		_ = c.cmd.Wait()
	})
	return c
}

func (c *tlsClients) send(line string) {
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// await waits for the client process to print line.
func (c *tlsClients) await(line string) {
	c.t.Helper()
	deadline := time.After(2 * testenv.Timeout)
	for {
		select {
		case got, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("the client process ended before saying %q", line)
			}
			if got == line {
				return
			}
			if strings.HasPrefix(got, "error") {
				c.t.Fatalf("client process: %s", got)
			}
		case <-deadline:
			c.t.Fatalf("the client process did not say %q", line)
		}
	}
}

// stop closes the client process's input: it closes its connections and exits.
func (c *tlsClients) stop() {
	_ = c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		c.t.Errorf("client process: %v", err)
	}
}

// TestTLSClientProcess is the client process of TestIdleMemoryTLS, skipped otherwise.
func TestTLSClientProcess(t *testing.T) {
	env := os.Getenv(envTLSClients)
	if env == "" {
		t.Skip("the client process of TestIdleMemoryTLS")
	}
	var addr, caFile string
	var n int
	var web bool
	if _, err := fmt.Sscan(env, &addr, &n, &web, &caFile); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "localhost"}
	cfg.RootCAs.AppendCertsFromPEM(ca)
	var mu sync.Mutex
	var conns []net.Conn
	dialOne := func(i int) error {
		d := net.Dialer{LocalAddr: sourceAddr(i)}
		raw, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		c := tls.Client(raw, cfg)
		if err := c.Handshake(); err != nil {
			return err
		}
		msg := []byte("CONNECT-sized hello, about as long as an MQTT CONNECT packet")
		if web {
			if _, _, err := wsHandshake(c, "/mqtt", "mqtt"); err != nil {
				return err
			}
			msg = frame(true, wsBinary, msg)
		}
		if _, err := c.Write(msg); err != nil {
			return err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return nil
	}
	in := bufio.NewScanner(os.Stdin)
	if err := dialOne(0); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("warm")
	if !in.Scan() || in.Text() != "go" {
		return
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := 1 + w; i < n; i += 8 {
				if err := dialOne(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("ready")
	for in.Scan() {
	}
	for _, c := range conns {
		_ = c.Close()
	}
}
