package session

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// gatedConn is a Conn whose WriteAfter stops inside the "system call", with the session's
// lock already let go, until the test opens the gate: it plays a write that takes long.
type gatedConn struct {
	fakeConn
	mu      sync.Mutex // the connection's write lock
	inWrite chan struct{}
	gate    chan struct{}
}

func (c *gatedConn) WriteAfter(b []byte, held sync.Locker) (int, error) {
	c.mu.Lock()
	held.Unlock()
	defer c.mu.Unlock()
	c.inWrite <- struct{}{}
	<-c.gate
	return c.fakeConn.Write(b)
}

// Write is the locked writers' path (flushLocked): it waits for the write in progress, as
// the connection's write lock makes it.
func (c *gatedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fakeConn.Write(b)
}

// TestFlushWritesWithoutLock: while a Flush is in its write, the session's lock is free
// (a delivery from another goroutine appends at once), a second Flush leaves its bytes to
// the writer and returns without writing, and the writer sends them next: every byte, in
// the order it was appended, in two writes.
func TestFlushWritesWithoutLock(t *testing.T) {
	synctest.Test(t, testFlushWritesWithoutLock) // a writer that never lets go fails at once
}

func testFlushWritesWithoutLock(t *testing.T) {
	s := New(1, "sub", testLimits())
	c := &gatedConn{inWrite: make(chan struct{}), gate: make(chan struct{})}
	s.Attach(c, ConnectInfo{Version: packet.V311}, nil, at(0))

	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Flush()
	}()
	<-c.inWrite // the writer is in its write, without the session's lock

	if !s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 2}) {
		t.Fatal("the second packet found bytes pending: the writer did not take the first ones")
	}
	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 3})
	s.Flush() // another writer is at work: leaves its bytes to it
	if c.writes != 0 {
		t.Fatalf("%d writes done while the first was in progress", c.writes)
	}

	close(c.gate)
	<-c.inWrite // the writer comes back for what was appended meanwhile
	<-done
	if c.writes != 2 {
		t.Errorf("%d writes, want 2: the first batch, then what came during it", c.writes)
	}
	equalLines(t, "written", c.lines(t, packet.V311), []string{"PUBACK id1", "PUBACK id2", "PUBACK id3"})

	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 4})
	go func() { <-c.inWrite }()
	s.Flush()
	if c.writes != 3 {
		t.Errorf("%d writes after the hand-off, want 3: a later Flush writes again", c.writes)
	}
}

// TestFlushLockedAfterWriter: a writer that keeps the session's lock (a DISCONNECT and its
// flush) while a Flush is in its write sends its bytes after the write in progress, not
// before it.
func TestFlushLockedAfterWriter(t *testing.T) {
	synctest.Test(t, testFlushLockedAfterWriter)
}

func testFlushLockedAfterWriter(t *testing.T) {
	s := New(1, "sub", testLimits())
	c := &gatedConn{inWrite: make(chan struct{}), gate: make(chan struct{})}
	s.Attach(c, ConnectInfo{Version: packet.V5}, nil, at(0))

	s.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: 1})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Flush()
	}()
	<-c.inWrite
	disconnected := make(chan struct{})
	go func() {
		defer close(disconnected)
		s.Disconnect(packet.ServerShuttingDown) // writes under the lock: waits for the write
	}()
	close(c.gate)
	<-disconnected
	<-done
	equalLines(t, "written", c.lines(t, packet.V5), []string{"PUBACK id1", "DISCONNECT rc=0x8b"})
	if !c.shutdown {
		t.Error("the connection was not shut down after the DISCONNECT")
	}
}
