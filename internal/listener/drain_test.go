package listener

import (
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// drainRecorder is a recorder that is also a Drainer: it reports each OnDrained with what
// the connection had queued then.
type drainRecorder struct {
	*recorder
	drained chan int // Buffered() at OnDrained
	calls   atomic.Int64
}

func (r *drainRecorder) OnDrained(c Conn) {
	r.calls.Add(1)
	r.drained <- c.Buffered()
}

// TestNotifyDrained: a notice asked for while megabytes wait for a client that does not
// read comes once the client has read them all, with nothing queued; several requests
// before it are one notice; a request when nothing is queued is answered at once.
func TestNotifyDrained(t *testing.T) {
	transports(t, func(t *testing.T, typ string) {
		r := &drainRecorder{recorder: newRecorder(t), drained: make(chan int, 16)}
		var queued atomic.Int64
		r.data = func(c Conn, _ []byte) {
			queued.Store(int64(writeBurst(t, c)))
			c.NotifyDrained()
			c.NotifyDrained() // the same request
		}
		s := newTestServer(t, r, Options{})
		l := listen(t, s, typ)
		c := dial(t, l)
		sc := recv(t, r.opened, "OnOpen")
		c.send(t, []byte("go"))
		testenv.WaitFor(t, "the writes", func() bool { return queued.Load() != 0 })
		if queued.Load() <= 0 {
			t.Fatalf("test broken: nothing queued for a client that does not read")
		}
		select {
		case b := <-r.drained:
			t.Fatalf("OnDrained (Buffered %d) while %d bytes were queued and the client read nothing", b, queued.Load())
		default:
		}
		got := c.recv(t, burstSize)
		if len(got) != burstSize {
			t.Fatalf("read %d bytes", len(got))
		}
		if b := recv(t, r.drained, "OnDrained"); b != 0 {
			t.Fatalf("OnDrained with %d bytes still queued", b)
		}
		if n := r.calls.Load(); n != 1 {
			t.Fatalf("%d OnDrained calls for one request", n)
		}

		// Nothing queued: the notice comes at once.
		sc.NotifyDrained()
		if b := recv(t, r.drained, "OnDrained"); b != 0 {
			t.Fatalf("OnDrained with %d bytes queued", b)
		}
		testenv.WaitFor(t, "the delivering goroutine to end", func() bool { return !deliveringDrained(s) })
	})
}

// TestNotifyDrainedNotDrainer: without a Drainer, NotifyDrained does nothing.
func TestNotifyDrainedNotDrainer(t *testing.T) {
	r := newRecorder(t)
	s := newTestServer(t, r, Options{})
	l := listen(t, s, "tcp")
	dial(t, l)
	sc := recv(t, r.opened, "OnOpen")
	sc.NotifyDrained()
	if deliveringDrained(s) || sc.(*conn).state.Load()&stWantDrain != 0 {
		t.Fatal("a notice was queued for a Handler that is no Drainer")
	}
}

func deliveringDrained(s *Server) bool {
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	return s.drain.running
}
