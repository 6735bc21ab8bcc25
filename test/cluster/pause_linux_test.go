package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestPauseOwner: the follower serving a client is paused (SIGSTOP) for longer than the
// lease while another node publishes to the client's subscription, before, at and after
// the moment of the pause. The client connects to another node, which cannot ask the
// paused owner for the session: it gets CONNACK 0, session present 0, once the lease has
// passed (lease + a second at most as the chain of timeouts goes, well before
// mqtt.connect_timeout, which is short here so that a hand-over outliving it fails).
// Resumed (SIGCONT) after that, the old owner writes nothing more to the old connection,
// not even what it had encoded for it before the pause, and closes it. -rounds repeats
// the pause.
func TestPauseOwner(t *testing.T) {
	c, leader := servingCluster(t, func(_ int, k *nodeConfig) {
		k.ClusterYAML = "    lease: 4s\n    claim_timeout: 6s\n"
		k.YAML = "mqtt:\n  connect_timeout: 7s\n"
	})
	owner, others := c.split(leader, false)
	pub := mqtttest.DialRaw(t, others[1].mqttAddr())
	if ack, err := pub.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("pauser")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("publisher's CONNACK %v %v", connackCode(ack), err)
	}
	for round := range *rounds {
		cid := fmt.Sprint("sleeper-", round)
		old := mqtttest.DialRaw(t, owner.mqttAddr())
		if ack, err := old.Connect(persistent(cid)); err != nil || ack.Code != packet.Success {
			t.Fatalf("round %d: CONNACK on %s %v %v", round+1, owner.name, connackCode(ack), err)
		}
		topic := fmt.Sprint("pause/", round)
		old.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(topic)}}}, packet.SUBACK)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // QoS 0 every 2 ms from another node, until stop
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				_ = pub.Send(&packet.Publish{Topic: []byte(topic), Payload: []byte(fmt.Sprint(i))})
			}
		}()
		if p, err := old.Read(10 * time.Second); err != nil || p.Type() != packet.PUBLISH {
			close(stop)
			t.Fatalf("round %d: the subscriber on %s before the pause: %v %v", round+1, owner.name, p, err)
		}
		owner.stop()
		paused := time.Now()

		moved := mqtttest.DialRaw(t, others[0].mqttAddr())
		ack, err := moved.Connect(persistent(cid))
		took := time.Since(paused)
		close(stop)
		wg.Wait()
		if err != nil || ack.Code != packet.Success || ack.SessionPresent {
			owner.cont()
			t.Fatalf("round %d: CONNECT of %s on %s with its owner %s paused: %v %v (session present %v) %v after the pause; want 0, session present 0 before mqtt.connect_timeout",
				round+1, cid, others[0].name, owner.name, connackCode(ack), err, ack != nil && ack.SessionPresent, took.Round(time.Millisecond))
		}
		// What the owner wrote before the pause is in the socket already (loopback):
		// read it all, then wake the owner.
		before := drain(t, old)
		owner.cont()
		woken := time.Now()
		for {
			p, err := old.Read(20 * time.Second)
			if err != nil {
				if mqtttest.IsTimeout(err) {
					t.Fatalf("round %d: %s, woken, neither wrote to nor closed the old connection", round+1, owner.name)
				}
				break // closed
			}
			t.Fatalf("round %d: %s, woken after its lease, wrote %s to the connection it lost, %v after SIGCONT",
				round+1, owner.name, describe(p), time.Since(woken).Round(time.Millisecond))
		}
		t.Logf("round %d: CONNACK on %s %v after %s was paused (lease 4s); %d messages read before SIGCONT, none after; the old connection closed %v after SIGCONT",
			round+1, others[0].name, took.Round(time.Millisecond), owner.name, before, time.Since(woken).Round(time.Millisecond))
		if err := moved.Send(packet.Pingreq{}); err != nil {
			t.Fatal(err)
		}
		if p, err := moved.Read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
			t.Fatalf("round %d: the moved connection: %v %v", round+1, p, err)
		}
		_ = moved.Send(&packet.Disconnect{})
		if round+1 < *rounds { // the woken node back, for the next round
			c.waitFormed()
			waitServing(t, owner)
		}
	}
}

// describe names a packet, with its reason code for a DISCONNECT.
func describe(p packet.Packet) string {
	if d, ok := p.(*packet.Disconnect); ok {
		return fmt.Sprintf("DISCONNECT %#x", byte(d.Code))
	}
	return p.Type().String()
}

// drain reads every packet that has reached the client's socket, until nothing more is
// buffered there or in the client, and returns how many PUBLISH packets it read.
func drain(t *testing.T, r *mqtttest.Raw) int {
	t.Helper()
	n := 0
	for unread(t, r.Conn) > 0 || r.Buffered() > 0 {
		p, err := r.Read(5 * time.Second)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n
			}
			t.Fatalf("reading what was sent before the pause: %v", err)
		}
		if p.Type() == packet.PUBLISH {
			n++
		}
	}
	return n
}

// unread returns the bytes that have reached c's socket and that it has not read.
func unread(t *testing.T, c net.Conn) int {
	t.Helper()
	sc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	var ioErr syscall.Errno
	if err := sc.Control(func(fd uintptr) {
		_, _, ioErr = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || ioErr != 0 {
		t.Fatalf("ioctl(TIOCINQ): %v %v", err, ioErr)
	}
	return int(n)
}
