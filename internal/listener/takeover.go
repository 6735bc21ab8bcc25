//go:build !linux

package listener

import (
	"net"
	"syscall"

	"github.com/lesismal/nbio"
)

// takeOver turns an accepted socket into an nbio conn, whose descriptor is close-on-exec.
//
// Why: nbio (v1.6.12) takes a socket over with a plain dup(2), which does not set
// FD_CLOEXEC. Every child process the broker's process starts (exec.Command: a test running
// mosquitto_pub, a hook script) would then inherit every open connection and keep each
// socket alive for as long as it runs. That alone keeps connections half alive after we
// close them, but it also breaks nbio's polling: epoll forgets a registration only when
// the socket itself is released, not when our descriptor is closed, and it reports events
// by descriptor number. So after we close connection A on descriptor N while a child still
// holds A's socket, the engine's epoll keeps reporting A's events (level-triggered, and
// A's peer has hung up: EPOLLRDHUP) under the number N. Once N is reused by a new
// connection B, nbio looks N up in its table, finds B, and closes it with io.EOF: the
// client gets a FIN right after its first answer (CONNACK), and OnClose gets io.EOF
// without the peer having sent anything of the kind. A standalone broker never forks, so
// it never showed this; an in-process test that starts mosquitto_pub did, for 1-30% of
// connections.
//
// The dup and the flag are done holding syscall.ForkLock for reading, as the standard
// library does wherever it cannot create a descriptor close-on-exec atomically: a fork
// (which holds it for writing) cannot fall between the two.
//
// What remains is the moment a child exists and has not yet closed its close-on-exec
// descriptors (between fork and the end of exec: sub-millisecond), plus however long a
// poller sits on an epoll batch fetched then. A stale event from that moment can still hit
// a reused number; nbio would have to remove a descriptor from epoll before closing it,
// which v1.6.12 does not (poller.deleteConn). Seen under -race with a fork every 5ms and
// thousands of connections a second: a few connections in ten thousand, against hundreds
// in ten thousand before.
func takeOver(raw net.Conn) (*nbio.Conn, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	nc, err := nbio.NBConn(raw)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(nc.Hash())
	return nc, nil
}
