package bridge

import (
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// sendQoS publishes payloads from to to-1 on topic through c at qos, in bursts of 10,
// and waits for each to be acknowledged (QoS 2: PUBCOMP). With bursts of 100 from a
// Paho publisher to Mosquitto 2.0.11 (more than its in-flight window of 20 outstanding),
// many QoS 2 messages never reached a subscriber there, with no bridge involved; which of
// the two drops them was not found. Bursts of 10 lose none.
func sendQoS(t testing.TB, c paho.Client, topic string, qos byte, from, to int) {
	t.Helper()
	const burst = 10
	for from < to {
		toks := make([]paho.Token, 0, burst)
		for i := from; i < min(from+burst, to); i++ {
			toks = append(toks, c.Publish(topic, qos, false, strconv.Itoa(i)))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
				t.Fatalf("publish not acknowledged: %v", tok.Error())
			}
		}
		from += len(toks)
	}
}

// exactlyOnce checks that each payload 0 to n-1 arrived once over the inboxes.
func exactlyOnce(t testing.TB, n int, ins ...*inbox) {
	t.Helper()
	got := map[string]int{}
	for _, in := range ins {
		for p, c := range in.payloads() {
			got[p] += c
		}
	}
	missing, dups := 0, 0
	var twice []int
	for i := range n {
		switch c := got[strconv.Itoa(i)]; {
		case c == 0:
			missing++
		case c > 1:
			dups += c - 1
			twice = append(twice, i)
		}
	}
	if missing > 0 || dups > 0 {
		t.Errorf("%d messages: %d missing, %d duplicates at the QoS 2 subscriber (more than once: %v)", n, missing, dups, twice[:min(len(twice), 20)])
	}
}

// TestQoS2Out carries QoS 2 messages out to Mosquitto, store on, while (1) the remote's
// acknowledgements are lost and the bridge's connection is cut, and (2) they are lost
// again and Mosquitto is stopped (SIGTERM: it saves the bridge's session) and started
// again, while local messages keep coming: each message reaches a QoS 2 subscriber on
// Mosquitto exactly once, and leaves the bridge's stored queue (fails with the line at
// QoS 1, which is how a QoS 2 message crossed before: the PUBLISHes whose
// acknowledgement was lost are sent again and delivered twice).
func TestQoS2Out(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) { qos2Out(t, proto) })
	}
}

func qos2Out(t *testing.T, proto string) {
	mq := startMosquitto(t, "")
	px := startProxy(t, mq.addr())
	bc := bridgeConf("up", px.addr(), proto, conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 2})
	bc.QueueMessages = 100000
	sb := startStored(t, filepath.Join(t.TempDir(), "store"), conf.EngineLog, bc)
	br := sb.set.Bridges()[0]
	sub, remote := clientQoS(t, mq.addr(), "remote-sub", false, "q/#", 2)
	pub, _ := client(t, sb.addr, "local-pub", true, "")
	probe(t, pub, "q/probe", remote)

	const n = 1200
	sendQoS(t, pub, "q/m", 2, 0, n/4)
	// (1) The remote's PUBRECs and PUBCOMPs are lost, then the connection breaks.
	px.down.Store(true)
	sendQoS(t, pub, "q/m", 2, n/4, n/2)
	testenv.WaitFor(t, "acknowledgements from the remote lost", func() bool { return px.dropped.Load() >= 40 })
	px.cut()
	testenv.WaitFor(t, "the bridge to carry every message", func() bool {
		st := br.Stats()
		return st.Up && st.Depth == 0 && st.Reconnects >= 1
	})
	testenv.WaitFor(t, "the first half at the subscriber", func() bool {
		for i := range n / 2 {
			if remote.count(strconv.Itoa(i)) == 0 {
				return false
			}
		}
		return true
	})
	// (2) The subscriber goes (Mosquitto keeps its session); acknowledgements are lost
	// again, and Mosquitto stops with the bridge's messages in flight.
	sub.Disconnect(100)
	lost := px.dropped.Load()
	px.down.Store(true)
	sendQoS(t, pub, "q/m", 2, n/2, 2*n/3)
	testenv.WaitFor(t, "acknowledgements from the remote lost", func() bool { return px.dropped.Load() >= lost+40 })
	mq.stop(syscall.SIGTERM)
	testenv.WaitFor(t, "the bridge to see the remote go", func() bool { return !br.Stats().Up })
	sendQoS(t, pub, "q/m", 2, 2*n/3, 5*n/6) // queued while the remote is down
	mq.start()
	sendQoS(t, pub, "q/m", 2, 5*n/6, n)
	testenv.WaitFor(t, "the bridge to carry every message", func() bool {
		st := br.Stats()
		return st.Up && st.Depth == 0
	})
	_, remote2 := clientQoS(t, mq.addr(), "remote-sub", false, "q/#", 2)
	publish(t, pub, "q/end", 2, "end")
	testenv.WaitFor(t, "the end marker at the subscriber", func() bool { return remote2.count("end") > 0 })
	st := br.Stats()
	t.Logf("%s: bridge sent %d, resent %d (PUBLISH with DUP or PUBREL), %d reconnects, %d stored",
		proto, st.Out, st.Resent, st.Reconnects, st.Stored)
	if st.Stored != 0 || st.Dropped != 0 {
		t.Errorf("the stored queue is not empty, or dropped: %+v", st)
	}
	exactlyOnce(t, n, remote, remote2)
}

// TestQoS2In carries QoS 2 messages in from Mosquitto to a persistent QoS 2 subscriber
// here, store on, while (1) the bridge's PUBRECs are lost and its connection is cut, so
// that Mosquitto sends the PUBLISHes again with DUP, and (2) they are lost again and
// Mosquitto is stopped (SIGTERM: it keeps the bridge's session and what is in flight to
// it) and started again: each message reaches the subscriber exactly once (fails
// without the bridge's QoS 2 packet ids: the DUP PUBLISHes are published again).
//
// Each loss starts once Mosquitto's log shows every earlier exchange with the bridge
// ended, so that only the lost messages are in flight however late the bridge's
// acknowledgements come on a loaded machine: Mosquitto 2.0.11 keeps the state of at most
// 20 exchanges towards a client across its restart, and one beyond them that it had
// released (PUBREL sent) comes back as a new PUBLISH, which the bridge rightly publishes
// again (docs/bridges.md).
func TestQoS2In(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) { qos2In(t, proto) })
	}
}

func qos2In(t *testing.T, proto string) {
	mq := startMosquitto(t, "")
	px := startProxy(t, mq.addr())
	bc := bridgeConf("up", px.addr(), proto, conf.BridgeTopic{Pattern: "c/#", Direction: conf.BridgeIn, QoS: 2})
	sb := startStored(t, filepath.Join(t.TempDir(), "store"), conf.EngineLog, bc)
	br := sb.set.Bridges()[0]
	_, local := clientQoS(t, sb.addr, "local-sub", false, "c/#", 2)
	rpub, _ := client(t, mq.addr(), "remote-pub", true, "")
	probe(t, rpub, "c/probe", local)

	// Fewer messages than Mosquitto's in-flight window (20) go while the bridge's
	// acknowledgements are lost: all of them are in flight when the connection breaks.
	const n, lost = 1200, 10
	settled := func() {
		testenv.WaitFor(t, "Mosquitto to end every exchange with the bridge", func() bool { return mq.inFlightTo(bc.ClientID) == 0 })
	}
	sendQoS(t, rpub, "c/m", 2, 0, n/4)
	// (1) The bridge's PUBRECs are lost, then the connection breaks.
	settled()
	px.up.Store(true)
	sendQoS(t, rpub, "c/m", 2, n/4, n/4+lost)
	testenv.WaitFor(t, "the bridge's PUBRECs lost", func() bool { return px.dropped.Load() >= 4*lost })
	px.cut()
	testenv.WaitFor(t, "the bridge back", func() bool { st := br.Stats(); return st.Up && st.Reconnects == 1 })
	sendQoS(t, rpub, "c/m", 2, n/4+lost, n/2)
	testenv.WaitFor(t, "the first half here", func() bool {
		for i := range n / 2 {
			if local.count(strconv.Itoa(i)) == 0 {
				return false
			}
		}
		return true
	})
	// (2) Lost again, and Mosquitto stops with messages in flight to the bridge.
	settled()
	dropped := px.dropped.Load()
	px.up.Store(true)
	sendQoS(t, rpub, "c/m", 2, n/2, n/2+lost)
	testenv.WaitFor(t, "the bridge's PUBRECs lost", func() bool { return px.dropped.Load() >= dropped+4*lost })
	rpub.Disconnect(100)
	mq.stop(syscall.SIGTERM)
	testenv.WaitFor(t, "the bridge to see the remote go", func() bool { return !br.Stats().Up })
	mq.start()
	rpub, _ = client(t, mq.addr(), "remote-pub", true, "")
	sendQoS(t, rpub, "c/m", 2, n/2+lost, n)
	publish(t, rpub, "c/end", 2, "end")
	testenv.WaitFor(t, "the end marker here", func() bool { return local.count("end") > 0 })
	st := br.Stats()
	t.Logf("%s: bridge published %d here, %d reconnects", proto, st.In, st.Reconnects)
	exactlyOnce(t, n, local)
}
