package bridge

import (
	"net"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestCloseSilentRemote: a remote that accepts the connection and never answers the
// CONNECT (or never reads) does not hold up the broker's Close for the handshake's keep
// alive period (60s here, beyond the test's bound).
func TestCloseSilentRemote(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	bc := bridgeConf("silent", l.Addr().String(), conf.BridgeV5, conf.BridgeTopic{Pattern: "a/#"})
	bc.KeepAlive = conf.Duration(60 * time.Second)
	_, _, set := startBifrost(t, bc)
	var c net.Conn
	select {
	case c = <-accepted:
		defer c.Close()
	case <-time.After(testenv.Timeout):
		t.Fatal("the bridge did not connect")
	}
	// Once the CONNECT is here, the bridge waits for the CONNACK.
	_ = c.SetReadDeadline(time.Now().Add(testenv.Timeout))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("no CONNECT: %v", err)
	}
	closed := make(chan struct{})
	go func() { set.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(testenv.Timeout):
		t.Fatal("Close waited for the silent remote")
	}
}

// TestCloseStalledRemote: a remote that accepts the bridge and then stops reading blocks
// the bridge's writes once the socket buffers fill; Close must not wait for it longer
// than the second it gives the DISCONNECT.
func TestCloseStalledRemote(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	connected := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		if _, err := c.Read(make([]byte, 256)); err != nil { // the CONNECT, whole on loopback
			c.Close()
			return
		}
		_, _ = c.Write([]byte{0x20, 3, 0, 0, 0}) // CONNACK 5.0: accepted, no properties
		connected <- c                           // and never read again
	}()
	bc := bridgeConf("stalled", l.Addr().String(), conf.BridgeV5, conf.BridgeTopic{Pattern: "a/#"})
	bc.KeepAlive = conf.Duration(60 * time.Second)
	bc.QueueBytes = 1 << 30
	b, _, set := startBifrost(t, bc)
	var c net.Conn
	select {
	case c = <-connected:
		defer c.Close()
	case <-time.After(testenv.Timeout):
		t.Fatal("the bridge did not connect")
	}
	testenv.WaitFor(t, "the bridge up", func() bool { return set.Bridges()[0].Stats().Up })
	payload := make([]byte, 64<<10)
	for range 512 { // 32 MiB, well over what loopback sockets buffer
		if err := b.Publish("a/x", payload, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan struct{})
	go func() { set.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(testenv.Timeout):
		t.Fatal("Close waited for the stalled remote")
	}
}
