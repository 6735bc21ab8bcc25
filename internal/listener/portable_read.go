//go:build !linux || bifrost_portable

package listener

import (
	"sync"

	"github.com/bifrost-mqtt/bifrost/internal/bufpool"
)

// A connection's reader on the portable engine: one goroutine per connection, blocked in
// Read while the client says nothing, handing what it reads to the transport as a poller
// does on the epoll engine.

// readMin is the read buffer a connection starts with and comes back to: what an MQTT
// client sends when it is not streaming (CONNECT, PINGREQ, a small PUBLISH) fits.
const readMin = 1 << 10

// readLoop reads c until its socket ends, then closes it and delivers the close
// (readEnded). The buffer follows the traffic: it grows (4x, up to
// Options.ReadBufferSize) when a read fills it, and goes back to readMin when a read would
// have fitted that, so that an idle connection holds readMin bytes, not the largest read.
func (s *Server) readLoop(c *conn) {
	var ws wsStream // ws: the frame decoder's state between reads (ws.go)
	size := min(readMin, s.o.ReadBufferSize)
	buf := bufpool.Get(size)
	for {
		if c.paused() {
			s.waitResumed(c)
		}
		b := (*buf)[:size]
		n, err := c.nc.Read(b)
		if n > 0 {
			switch {
			case c.l.kind&kindSecure != 0:
				bufs := s.tlsBufs.Get().(*pumpBufs)
				c.tls().received(b[:n], bufs)
				s.tlsBufs.Put(bufs)
			case c.l.kind&kindWeb != 0:
				ws.keep(wsFeed(c, &ws, ws.start(b[:n]), -1))
			default:
				c.onData(b[:n], -1)
			}
		}
		if err != nil {
			bufpool.Put(buf)
			c.readEnded(err)
			return
		}
		if next := nextReadSize(size, n, s.o.ReadBufferSize); next != size {
			bufpool.Put(buf)
			buf, size = bufpool.Get(next), next
		}
	}
}

// nextReadSize returns the size of the next read, after a read of n bytes into size.
func nextReadSize(size, n, limit int) int {
	switch {
	case n == size && size < limit:
		return min(4*size, limit)
	case n <= readMin && size > readMin:
		return readMin
	}
	return size
}

// waitResumed returns once c's reads are resumed or c is closing (pause.go).
func (s *Server) waitResumed(c *conn) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if s.resumed == nil {
		s.resumed = sync.NewCond(&s.pauseMu)
	}
	for c.state.Load()&(stPaused|stCloseReq|stFdClosed) == stPaused {
		s.resumed.Wait()
	}
}

// readsChanged wakes the readers waiting for a resume (waitResumed). c.wmu is held.
func (c *conn) readsChanged() {
	s := c.l.srv
	s.pauseMu.Lock()
	if s.resumed != nil {
		s.resumed.Broadcast()
	}
	s.pauseMu.Unlock()
}
