package bridge

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// A proxy forwards loopback TCP connections to a target, so that a test can lose the
// packets of one direction (freeze) and cut every connection, as a network would.
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	// frozen: what the target sends (down) or what the client sends (up) is read and
	// dropped, counted in dropped. A new connection starts unfrozen.
	down, up atomic.Bool
	dropped  atomic.Int64
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	go p.accept()
	t.Cleanup(func() {
		l.Close()
		p.cut()
	})
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		r, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.down.Store(false)
		p.up.Store(false)
		p.mu.Lock()
		p.conns = append(p.conns, c, r)
		p.mu.Unlock()
		go p.pump(r, c, &p.down)
		go p.pump(c, r, &p.up)
	}
}

// pump copies from src to dst, dropping what comes while frozen is set.
func (p *proxy) pump(src, dst net.Conn, frozen *atomic.Bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if frozen.Load() {
				p.dropped.Add(int64(n))
			} else if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}
