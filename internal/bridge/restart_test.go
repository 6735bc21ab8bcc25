package bridge

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestRemoteRestart stops the remote Mosquitto in the middle of QoS 1 traffic through an
// out bridge, keeps publishing while it is down, and starts it again. Every message the
// local broker acknowledged must be acknowledged by the remote in the end (the bridge's
// queue empties with nothing dropped): those queued while it was down, and those in
// flight when it went, sent again.
//
// With SIGTERM, Mosquitto saves the subscriber's persistent session and what it holds
// for it, so the check runs end to end: the subscriber gets every message, duplicates
// (sent again after a PUBACK lost with the connection) counted and reported. With
// SIGKILL, Mosquitto loses whatever it held but had not delivered yet, which is no
// bridge's to keep: the subscriber's count is reported, not checked.
func TestRemoteRestart(t *testing.T) {
	for _, proto := range protocols {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			t.Run(proto+"/"+sig.String(), func(t *testing.T) {
				remoteRestart(t, proto, sig)
			})
		}
	}
}

func remoteRestart(t *testing.T, proto string, sig syscall.Signal) {
	mq := startMosquitto(t, "max_inflight_messages 100\n")
	bc := bridgeConf("up", mq.addr(), proto, conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
	bc.QueueMessages = 100000
	// Slower to come back than the subscriber, which after SIGKILL must subscribe anew
	// before messages arrive for it: what it then misses is what Mosquitto lost.
	bc.RestartTimeout, bc.RestartTimeoutMax = conf.Duration(time.Second), conf.Duration(time.Second)
	_, addr, set := startBifrost(t, bc)
	br := set.Bridges()[0]
	sub, remote := client(t, mq.addr(), "remote-sub", false, "q/#")
	pub, _ := client(t, addr, "local-pub", true, "")
	probe(t, pub, "q/probe", remote)

	const n, burst = 3000, 100
	acked := 0
	send := func(upTo int) {
		for acked < upTo {
			toks := make([]paho.Token, 0, burst)
			for i := acked; i < min(acked+burst, upTo); i++ {
				toks = append(toks, pub.Publish("q/m", 1, false, strconv.Itoa(i)))
			}
			for _, tok := range toks {
				if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
					t.Fatalf("local publish not acknowledged: %v", tok.Error())
				}
			}
			acked += len(toks)
		}
	}
	send(n / 3)
	sub.Disconnect(100) // its session stays: with SIGTERM, Mosquitto saves what it queues there
	mq.stop(sig)
	testenv.WaitFor(t, "the bridge to see the remote go", func() bool { return !br.Stats().Up })
	send(n / 2) // queued while the remote is down
	mq.start()
	clientInto(t, mq.addr(), "remote-sub", false, "q/#", 1, remote)
	send(n)
	testenv.WaitFor(t, "the remote to acknowledge every message", func() bool {
		st := br.Stats()
		return st.Up && st.Depth == 0
	})
	st := br.Stats()
	if st.Dropped != 0 || st.Expired != 0 || st.TooLarge != 0 {
		t.Fatalf("messages dropped: %+v", st)
	}
	if st.Reconnects < 1 {
		t.Errorf("no reconnect counted: %+v", st)
	}
	probe(t, pub, "q/back", remote) // the subscriber is back: with SIGKILL it subscribes anew
	// At QoS 1, the end marker waits in the subscriber's queue behind what Mosquitto kept.
	publish(t, pub, "q/end", 1, "end")
	testenv.WaitFor(t, "the end marker on the remote", func() bool { return remote.count("end") > 0 })
	got := remote.payloads()
	missing, dups := 0, 0
	for i := range n {
		switch c := got[strconv.Itoa(i)]; {
		case c == 0:
			missing++
		case c > 1:
			dups += c - 1
		}
	}
	t.Logf("%s %s: %d acknowledged locally; remote subscriber: %d missing, %d duplicates; bridge: %d sent, %d resent, %d reconnects",
		proto, sig, n, missing, dups, st.Out, st.Resent, st.Reconnects)
	if sig == syscall.SIGTERM && missing > 0 {
		t.Errorf("%d of %d acknowledged messages never reached the remote subscriber", missing, n)
	}
}
