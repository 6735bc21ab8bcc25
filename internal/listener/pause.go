package listener

// Pausing a connection's reads: the broker's answer to hard memory pressure. A paused
// connection is not read, so what its peer sends waits in the kernel's socket buffers,
// and once those are full TCP's flow control stops the peer: the backpressure reaches the
// publisher instead of the broker's heap. Writes go on (a paused client still receives
// what it subscribed to), and so does the close of a connection whose peer hangs up.
//
// On the epoll engine pausing is one epoll_ctl(EPOLL_CTL_MOD) that drops EPOLLIN from the
// events the socket is watched for (epoll_conn_linux.go watchedEvents), and resuming one
// that puts it back: no goroutine, no buffer, and level-triggered epoll reports the bytes
// that waited at the next round. On the portable engine the connection's reader waits
// before its next read until the connection is resumed or closed (portable_read.go); not
// reading, it learns that a paused peer went away only once resumed, where epoll reports
// the hang-up at once.
//
// Keep alive: a paused connection's PINGREQs wait unread in its socket, so its idle
// timeout must not count while it is paused. The wheel keeps a paused connection whose
// timeout comes round (Server.expire renews it), and ResumeReads starts the timeout over:
// the client gets a full keep alive period from the moment it is read again.

// A Pauser is a Conn whose reads can be paused; every Conn of a Server is one.
type Pauser interface {
	// PauseReads stops reading from the connection until ResumeReads; it takes effect
	// before the next read (bytes already read are delivered). Writes go on, and the idle
	// timeout does not fire meanwhile. It does nothing on a closed connection.
	PauseReads()
	// ResumeReads reads the connection again, and starts its idle timeout over.
	ResumeReads()
}

var _ Pauser = (*conn)(nil)

// PauseReads implements Pauser.
func (c *conn) PauseReads() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	st := c.state.Load()
	if st&(stFdClosed|stCloseReq|stPaused) != 0 {
		return
	}
	c.state.Or(stPaused)
	c.readsChanged()
}

// ResumeReads implements Pauser. The idle timeout starts over before the reads are
// resumed, so that a timeout coming round meanwhile finds the connection either paused
// or active now (Server.renewPaused).
func (c *conn) ResumeReads() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	st := c.state.Load()
	if st&stPaused == 0 {
		return
	}
	c.Touch()
	c.state.And(^uint32(stPaused))
	if st&(stFdClosed|stCloseReq) == 0 {
		c.readsChanged()
	}
}

// paused reports whether c's reads are paused.
func (c *conn) paused() bool { return c.state.Load()&stPaused != 0 }

// renewPaused puts c, whose timeout has come round, back in the wheel if it is not
// closing and its reads are paused (for another period) or were resumed since it was
// found due (until its deadline); it reports whether it did.
func (s *Server) renewPaused(c *conn) bool {
	return s.wheel.renew(c,
		func(c *conn) bool { return c.state.Load()&(stFdClosed|stCloseReq|stShutdown) == 0 },
		(*conn).paused)
}
