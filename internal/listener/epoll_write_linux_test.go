//go:build !bifrost_portable

package listener

import (
	"fmt"
	"io"
	"runtime"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// writeHoldBack is where the write tests hold back, as the broker does at its
// slow-consumer threshold: a queue that never empties, and never grows past it.
const writeHoldBack = 64 << 10

// writeTarget opens a tcp connection whose client reads everything, and returns the
// server's side. queued makes the server's socket buffer tiny, so that writes go to the
// queue behind unsent bytes and the poller writes them out.
func writeTarget(tb testing.TB, queued bool) *conn {
	r := newRecorder(tb)
	s := newTestServer(tb, r, Options{})
	l := listen(tb, s, conf.ListenerTCP)
	client := dialTCP(tb, l)
	go func() { _, _ = io.Copy(io.Discard, client) }()
	c := recv(tb, r.opened, "OnOpen").(*conn)
	if queued {
		c.wmu.Lock()
		err := syscall.SetsockoptInt(int(c.fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 65536)
		c.wmu.Unlock()
		if err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

// writeHeld writes b to c once fewer than writeHoldBack bytes wait in c's queue.
func writeHeld(tb testing.TB, c *conn, b []byte) {
	for c.Buffered() > writeHoldBack {
		runtime.Gosched()
	}
	if _, err := c.Write(b); err != nil {
		tb.Fatal(err)
	}
}

// TestWriteAllocs: a write allocates nothing, whether the socket takes it or it is queued
// behind unsent bytes, in a queue that never empties (epoll_conn_linux.go writeSocket).
func TestWriteAllocs(t *testing.T) {
	if testenv.Race {
		t.Skip("counts allocations: the race detector adds its own")
	}
	for _, queued := range []bool{false, true} {
		t.Run(fmt.Sprintf("queued=%v", queued), func(t *testing.T) {
			c := writeTarget(t, queued)
			b := make([]byte, 1024)
			for range 1000 { // the queue's buffer comes from the pool, and settles
				writeHeld(t, c, b)
			}
			sawQueue := false // some write found bytes queued: the queued path ran
			if n := testing.AllocsPerRun(10000, func() {
				writeHeld(t, c, b)
				sawQueue = sawQueue || c.Buffered() > 0
			}); n != 0 {
				t.Errorf("%.2f allocations per write", n)
			}
			if queued && !sawQueue {
				t.Error("nothing queued: the test wrote straight to the socket")
			}
		})
	}
}

// BenchmarkWrite: Conn.Write on tcp, straight to the socket (direct) and behind unsent
// bytes (queued; the writer holds back at writeHoldBack).
//
//	go test -run '^$' -bench Write -benchmem ./internal/listener
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, queued := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/queued=%v", size, queued), func(b *testing.B) {
				c := writeTarget(b, queued)
				p := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					writeHeld(b, c, p)
				}
			})
		}
	}
}
