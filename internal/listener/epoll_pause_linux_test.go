//go:build linux && !bifrost_portable

package listener

import (
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestPausePeerLeaves: on the epoll engine a paused connection is still watched for a
// hang-up, so a peer that goes away while paused is closed at once. (The portable
// engine's reader does not read a paused connection, so it sees the peer gone when it is
// resumed: pause.go.)
func TestPausePeerLeaves(t *testing.T) {
	h := &pauseHandler{opened: make(chan Conn, 1), closed: make(chan error, 1)}
	s := newTestServer(t, h, Options{})
	l := listen(t, s, conf.ListenerTCP)
	nc := dialTCP(t, l)
	c := recv(t, h.opened, "OnOpen")
	c.(Pauser).PauseReads()
	_ = nc.Close()
	if err := recv(t, h.closed, "OnClose after the peer left"); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("closed with %v, want EOF", err)
	}
}
