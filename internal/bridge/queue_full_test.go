package bridge

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestRemoteDownAtStart: with the remote down, QoS 1 messages are kept up to
// queue_messages and the rest dropped and counted; when the remote comes up, what was
// kept reaches it. The bridge's state is published locally, retained, on its
// notification topic ("0" down, "1" up), and its metrics show it all.
func TestRemoteDownAtStart(t *testing.T) {
	mq := startMosquitto(t, "")
	mq.stop(syscall.SIGTERM) // a port of its own, nothing listening on it yet
	bc := bridgeConf("up", mq.addr(), conf.BridgeV5, conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
	bc.QueueMessages = 10
	_, addr, set := startBifrost(t, bc)
	br := set.Bridges()[0]
	pub, state := client(t, addr, "local", true, "$SYS/broker/connection/bifrost.up/state")
	testenv.WaitFor(t, "the state 0 notification", func() bool { return state.count("0") > 0 })

	const n = 15
	for i := range n {
		publish(t, pub, "q/m", 1, fmt.Sprintf("m%d", i))
	}
	if st := br.Stats(); st.Up || st.Depth != 10 || st.Dropped != n-10 {
		t.Fatalf("remote down: %+v, want 10 kept and %d dropped", st, n-10)
	}

	mq.start()
	_, remote := client(t, mq.addr(), "remote-sub", true, "q/#")
	testenv.WaitFor(t, "the state 1 notification", func() bool { return state.count("1") > 0 })
	testenv.WaitFor(t, "the queue to empty", func() bool { return br.Stats().Depth == 0 })
	// The kept messages crossed whether or not the subscriber had subscribed yet; the
	// remote acknowledged them. A second round, within the bound, reaches the subscriber
	// once each.
	const again = 8
	for i := range again {
		publish(t, pub, "q/m", 1, fmt.Sprintf("again%d", i))
	}
	testenv.WaitFor(t, "the second round on the remote", func() bool { return remote.count(fmt.Sprintf("again%d", again-1)) > 0 })
	for i := range again {
		if c := remote.count(fmt.Sprintf("again%d", i)); c != 1 {
			t.Errorf("again%d arrived %d times", i, c)
		}
	}

	testenv.WaitFor(t, "the remote's last PUBACK", func() bool { return br.Stats().Depth == 0 })
	sums, err := metrics.Gather(set.Collector())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name, label string
		value       float64
	}{
		{"bifrost_bridge_dropped_total", "queue_full", 5},
		{"bifrost_bridge_dropped_total", "expired", 0},
		{"bifrost_bridge_up", "", 1},
		{"bifrost_bridge_queue_depth", "", 0},
		{"bifrost_bridge_messages_total", "out", float64(br.Stats().Out)},
		{"bifrost_bridge_reconnects_total", "", 0},
	} {
		if got, ok := gathered(sums, w.name, w.label); !ok || got != w.value {
			t.Errorf("%s{%s} = %v (found %v), want %v", w.name, w.label, got, ok, w.value)
		}
	}
}

// gathered is the value of the series of name whose second label (direction or reason)
// is label ("" for a series with the bridge label alone).
func gathered(sums map[string]map[string]float64, name, label string) (float64, bool) {
	for labels, v := range sums[name] {
		ls := strings.Split(labels, ",")
		if label == "" && len(ls) == 1 || len(ls) == 2 && ls[1] == label {
			return v, true
		}
	}
	return 0, false
}
