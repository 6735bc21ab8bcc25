package mqtttest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// RaceConnects connects the client id cid to each of addrs at once and checks the one
// live connection per client id of a cluster: every CONNECT is accepted, then every
// connection but one gets DISCONNECT 0x8E (session taken over), and the one left answers
// a PINGREQ. It returns the one left.
func RaceConnects(t testing.TB, cid string, addrs []string) *Raw {
	t.Helper()
	clients := make([]*Raw, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		clients[i] = DialRaw(t, addr)
		wg.Go(func() {
			ack, err := clients[i].Connect(&packet.Connect{CleanStart: true, ClientID: []byte(cid)})
			if err == nil && ack.Code != packet.Success {
				err = fmt.Errorf("CONNACK %#x", byte(ack.Code))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: CONNECT on %s: %v", cid, addrs[i], err)
		}
	}
	closed := make([]bool, len(clients))
	losers := 0
	deadline := time.Now().Add(testenv.Timeout)
	for losers < len(clients)-1 && time.Now().Before(deadline) {
		for i, c := range clients {
			if closed[i] {
				continue
			}
			switch p, err := c.Read(50 * time.Millisecond); {
			case TakenOver(p, err):
				closed[i] = true
				losers++
			case IsTimeout(err):
			default:
				t.Fatalf("%s: the client on %s got %v, %v", cid, addrs[i], p, err)
			}
		}
	}
	if losers != len(clients)-1 {
		t.Fatalf("%s: %d of %d connections taken over; want all but one", cid, losers, len(clients))
	}
	i := slices.Index(closed, false)
	if err := clients[i].Send(packet.Pingreq{}); err != nil {
		t.Fatalf("%s: the winner on %s: %v", cid, addrs[i], err)
	}
	if p, err := clients[i].Read(5 * time.Second); err != nil || p.Type() != packet.PINGRESP {
		t.Fatalf("%s: the winner on %s does not answer: %v %v", cid, addrs[i], p, err)
	}
	return clients[i]
}
