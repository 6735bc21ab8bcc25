package hostile

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/packet/packettest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestConnackFirst: a client that resumes its persistent session gets the CONNACK before
// anything else [MQTT-3.2.0-1], while publishers flood a topic the session subscribes to,
// so that messages reach the session from other connections at the moment it comes
// online. Every other reconnect finds the previous connection still open and takes it
// over; the others find the session offline.
func TestConnackFirst(t *testing.T) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) { connackFirst(t, v) })
	}
}

func connackFirst(t *testing.T, v packet.Version) {
	const topic, publishers = "connack/first", 4
	reconnects := 150
	if testenv.Race {
		reconnects = 15 // under the flood a reconnect takes the race detector a fifth of a second
	}
	// The flood is what this test is about: a round of the poller serving it can take
	// the race detector on a loaded machine beyond the environment's 2 s connect timeout
	// before the CONNECT behind it is read, and the order, not the wait, is under test.
	e := start(t, func(c *conf.Config) { c.MQTT.ConnectTimeout = conf.Duration(testenv.Timeout) })
	persist := func(c *packet.Connect) {
		c.CleanStart = false
		if v == packet.V5 {
			c.Props.SessionExpiry = packet.Some[uint32](300)
		}
	}
	sub := e.dial(t, v)
	sub.connect("connack-sub", persist)
	sub.subscribe(1, 0, topic)
	_ = sub.conn.Close()

	var stop atomic.Bool
	var flood sync.WaitGroup
	defer func() {
		stop.Store(true)
		flood.Wait()
	}()
	batch := make([]byte, 0, 4096)
	for len(batch) < 4000 {
		batch = (&packet.Publish{Topic: []byte(topic), Payload: []byte("flood")}).AppendTo(batch, v)
	}
	for i := range publishers {
		p := e.dial(t, v)
		p.connect(fmt.Sprintf("connack-pub-%d", i), nil)
		flood.Go(func() {
			for !stop.Load() && p.write(batch) == nil {
			}
		})
	}

	var open net.Conn // the previous connection, left for the next to take over
	defer func() {
		if open != nil {
			_ = open.Close()
		}
	}()
	for i := range reconnects {
		c, err := net.DialTimeout("tcp", e.addr, testenv.Timeout)
		if err != nil {
			t.Fatal(err)
		}
		cp := &packet.Connect{Version: v, ClientID: []byte("connack-sub"), KeepAlive: 60}
		persist(cp)
		_ = c.SetDeadline(time.Now().Add(testenv.Timeout))
		if _, err := c.Write(cp.AppendTo(nil, v)); err != nil {
			t.Fatal(err)
		}
		p, err := packettest.ReadPacket(bufio.NewReader(c), v)
		if err != nil {
			t.Fatalf("reconnect %d: %v", i, err)
		}
		if ack, ok := p.(*packet.Connack); !ok || ack.Code != packet.Success || !ack.SessionPresent {
			t.Fatalf("reconnect %d: first packet %v, want a CONNACK accepting with the session present", i, p.Type())
		}
		if open != nil {
			_ = open.Close()
			open = nil
		}
		if i%2 == 0 {
			open = c
		} else {
			_ = c.Close()
		}
	}
}
