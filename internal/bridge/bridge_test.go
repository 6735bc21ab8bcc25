package bridge

import (
	"fmt"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

var protocols = []string{conf.BridgeV5, conf.BridgeV311}

// TestOut: local messages on an out topic reach subscribers on the remote Mosquitto, at
// QoS 0 and 1, over 5.0 and 3.1.1, with the prefixes applied as Mosquitto applies them.
func TestOut(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			mq := startMosquitto(t, "")
			_, addr, set := startBifrost(t, bridgeConf("up", mq.addr(), proto,
				conf.BridgeTopic{Pattern: "sensors/#", Direction: conf.BridgeOut, QoS: 1},
				conf.BridgeTopic{Pattern: "x/#", Direction: conf.BridgeOut, QoS: 1, LocalPrefix: "L/", RemotePrefix: "R/"}))
			_, remote := client(t, mq.addr(), "remote-sub", true, "#")
			pub, _ := client(t, addr, "local-pub", true, "")
			probe(t, pub, "sensors/probe", remote)
			const n = 200
			for i := range n {
				publish(t, pub, "sensors/a", byte(i%2), fmt.Sprintf("m%d", i))
			}
			publish(t, pub, "L/x/y", 1, "prefixed")
			publish(t, pub, "other/z", 1, "not-bridged")
			testenv.WaitFor(t, "every message on the remote", func() bool {
				for i := range n {
					if remote.count(fmt.Sprintf("m%d", i)) == 0 {
						return false
					}
				}
				return remote.count("prefixed") > 0
			})
			if got := remote.topicOf("prefixed"); got != "R/x/y" {
				t.Errorf("L/x/y arrived on %q, want R/x/y", got)
			}
			if remote.count("not-bridged") != 0 {
				t.Error("a message on no out topic crossed the bridge")
			}
			if st := set.Bridges()[0].Stats(); !st.Up || st.Out < n+1 || st.Dropped != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestIn: the remote's messages on an in topic reach local subscribers, with the
// prefixes applied, over 5.0 and 3.1.1.
func TestIn(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			mq := startMosquitto(t, "")
			_, addr, set := startBifrost(t, bridgeConf("down", mq.addr(), proto,
				conf.BridgeTopic{Pattern: "cmd/#", Direction: conf.BridgeIn, QoS: 1, LocalPrefix: "from-cloud/", RemotePrefix: "site1/"}))
			_, local := client(t, addr, "local-sub", true, "#")
			pub, _ := client(t, mq.addr(), "remote-pub", true, "")
			probe(t, pub, "site1/cmd/probe", local)
			const n = 200
			for i := range n {
				publish(t, pub, "site1/cmd/go", byte(i%2), fmt.Sprintf("m%d", i))
			}
			publish(t, pub, "cmd/unprefixed", 1, "not-bridged")
			testenv.WaitFor(t, "every message here", func() bool {
				for i := range n {
					if local.count(fmt.Sprintf("m%d", i)) == 0 {
						return false
					}
				}
				return true
			})
			if got := local.topicOf("m0"); got != "from-cloud/cmd/go" {
				t.Errorf("site1/cmd/go arrived on %q, want from-cloud/cmd/go", got)
			}
			if local.count("not-bridged") != 0 {
				t.Error("a remote message outside the in filter came in")
			}
			if st := set.Bridges()[0].Stats(); st.In < n {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestBothNoLoop: with direction both, a message published on either side arrives once
// on each side and never comes back: the remote does not echo the bridge's own messages
// (5.0 No Local; 3.1.1 the bridge marker) and the tap does not send back out what the
// bridge published here. A marker that crosses after each message shows that an echo,
// which would come first, did not.
func TestBothNoLoop(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			mq := startMosquitto(t, "")
			_, addr, _ := startBifrost(t, bridgeConf("both", mq.addr(), proto,
				conf.BridgeTopic{Pattern: "loop/#", Direction: conf.BridgeBoth, QoS: 1}))
			lpub, local := client(t, addr, "local", true, "loop/#")
			rpub, remote := client(t, mq.addr(), "remote", true, "loop/#")
			probe(t, lpub, "loop/probe-out", remote)
			probe(t, rpub, "loop/probe-in", local)
			noLoop(t, lpub, local, rpub, remote)
		})
	}
}

// noLoop publishes a message on each side and checks that each side saw each exactly
// once, by a marker sent after it across the bridge the other way.
func noLoop(t *testing.T, lpub paho.Client, local *inbox, rpub paho.Client, remote *inbox) {
	t.Helper()
	publish(t, lpub, "loop/a", 1, "from-local")
	testenv.WaitFor(t, "from-local on the remote", func() bool { return remote.count("from-local") > 0 })
	publish(t, rpub, "loop/b", 1, "from-remote")
	testenv.WaitFor(t, "from-remote here", func() bool { return local.count("from-remote") > 0 })
	// Markers: whatever echo there was is ahead of them.
	publish(t, rpub, "loop/m", 1, "marker-remote")
	testenv.WaitFor(t, "marker-remote here", func() bool { return local.count("marker-remote") > 0 })
	publish(t, lpub, "loop/m", 1, "marker-local")
	testenv.WaitFor(t, "marker-local on the remote", func() bool { return remote.count("marker-local") > 0 })
	for _, side := range []struct {
		name string
		in   *inbox
	}{{"local", local}, {"remote", remote}} {
		for p, n := range side.in.payloads() {
			if n != 1 && p[:5] != "probe" {
				t.Errorf("%s side got %q %d times, want once", side.name, p, n)
			}
		}
	}
}
