//go:build linux && !bifrost_portable

package listener

import (
	"io"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// pingPong answers "ping" with "pong" and counts closes by their error.
type pingPong struct{ eofs, others atomic.Int64 }

func (h *pingPong) OnOpen(Conn) {}
func (h *pingPong) OnData(c Conn, data []byte) {
	if string(data) == "ping" {
		_, _ = c.Write([]byte("pong"))
	}
}
func (h *pingPong) OnClose(_ Conn, err error) {
	if err == io.EOF {
		h.eofs.Add(1)
	} else if err != nil {
		h.others.Add(1)
	}
}

// TestForkStorm: many short connections in parallel against several Servers while child
// processes come and go (as in a test that runs mosquitto_pub), each connection sending a
// request and expecting the answer before the end. A child holds copies of every
// descriptor between its fork and its exec, close-on-exec ones too; an epoll loop that
// closed a descriptor still in epoll would see that socket's events under a number the
// kernel has given to a new connection, and close the new one. The epoll engine takes a
// descriptor out of epoll before closing it; 10 runs in a row under -race, none failed.
func TestForkStorm(t *testing.T) {
	sleep := testenv.Command(t, "sleep", "coreutils")
	const servers, workers, rounds = 3, 40, 30
	var ls []*Listener
	h := &pingPong{}
	for range servers {
		s := newTestServer(t, h, Options{})
		l, err := s.Listen(conf.Listener{Type: conf.ListenerTCP, Address: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}

	stop := make(chan struct{})
	var children sync.WaitGroup
	children.Add(1)
	go func() { // keep children coming, each living a while
		defer children.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			cmd := exec.Command(sleep, "0.3")
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			children.Add(1)
			go func() { _ = cmd.Wait(); children.Done() }()
		}
	}()

	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				l := ls[(w+r)%len(ls)]
				c, err := net.DialTCP("tcp", sourceAddr(w), l.Addr().(*net.TCPAddr))
				if err != nil {
					t.Error(err)
					return
				}
				_ = c.SetDeadline(time.Now().Add(testenv.Timeout))
				b := make([]byte, 4)
				_, err = c.Write([]byte("ping"))
				if err == nil {
					_, err = io.ReadFull(c, b)
				}
				if (err != nil || string(b) != "pong") && failed.Add(1) <= 5 {
					t.Errorf("round %d from %v: got %q, %v; want pong", r, c.LocalAddr(), b, err)
				}
				_ = c.Close()
			}
		}()
	}
	wg.Wait()
	close(stop)
	children.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d connections ended before their answer (OnClose: %d io.EOF, %d other errors)",
			n, workers*rounds, h.eofs.Load(), h.others.Load())
	}
}
