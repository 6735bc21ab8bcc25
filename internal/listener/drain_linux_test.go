package listener

import (
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestNotifyDrainedAt: with Options.DrainedAt, the notice comes once the queue is down to
// it, while bytes still wait: a client that stops reading there gets it all the same.
func TestNotifyDrainedAt(t *testing.T) {
	const at = burstSize / 2
	r := &drainRecorder{recorder: newRecorder(t), drained: make(chan int, 16)}
	var queued atomic.Int64
	r.data = func(c Conn, _ []byte) {
		cc := c.(*conn)
		cc.wmu.Lock() // a small socket buffer: the queue goes down a little at a time
		err := syscall.SetsockoptInt(int(cc.fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 16<<10)
		cc.wmu.Unlock()
		if err != nil {
			t.Error(err)
		}
		queued.Store(int64(writeBurst(t, c)))
		c.NotifyDrained()
	}
	s := newTestServer(t, r, Options{DrainedAt: at})
	l := listen(t, s, conf.ListenerTCP)
	c := dial(t, l)
	sc := recv(t, r.opened, "OnOpen")
	c.send(t, []byte("go"))
	testenv.WaitFor(t, "the writes", func() bool { return queued.Load() != 0 })
	if queued.Load() <= at {
		t.Fatalf("test broken: %d bytes queued, not more than DrainedAt", queued.Load())
	}
	select {
	case b := <-r.drained:
		t.Fatalf("OnDrained (Buffered %d) while %d bytes were queued and the client read nothing", b, queued.Load())
	default:
	}
	read := 0
	for sc.Buffered() > at {
		read += len(c.recv(t, 64<<10))
	}
	// The client reads no more: the queue stays well above 0.
	b := recv(t, r.drained, "OnDrained")
	if b > at || b == 0 {
		t.Fatalf("OnDrained with %d bytes queued, want 1 to %d", b, at)
	}
	if rest := sc.Buffered(); rest == 0 {
		t.Fatalf("test broken: the queue emptied after %d bytes read", read)
	}
}
