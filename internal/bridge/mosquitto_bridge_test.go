package bridge

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestMosquittoBridgeToBifrost: a Mosquitto bridge (3.1.1 with try_private, direction
// both) connects to bifrost. bifrost must accept the marked CONNECT (protocol level
// 0x84) and honour it: what the bridge publishes here is not echoed back to it, or it
// would come back to Mosquitto's subscribers a second time and loop.
func TestMosquittoBridgeToBifrost(t *testing.T) {
	_, addr, _ := startBifrost(t)
	mq := startMosquitto(t, fmt.Sprintf("connection tobif\naddress %s\nbridge_protocol_version mqttv311\n"+
		"try_private true\ncleansession true\nremote_clientid mq-bridge\nrestart_timeout 1\nnotifications false\n"+
		"topic loop/# both 1\n", addr))
	lpub, local := client(t, addr, "local", true, "loop/#")
	rpub, remote := client(t, mq.addr(), "remote", true, "loop/#")
	probe(t, rpub, "loop/probe-in", local)
	probe(t, lpub, "loop/probe-out", remote)
	noLoop(t, lpub, local, rpub, remote)
}

// TestMosquittoDefaultBridgeToBifrost: a Mosquitto bridge on its defaults (notifications
// true, try_private true; 3.1.1, its default protocol, and 5.0) connects to bifrost. Its
// CONNECT carries a will, retained "0", on $SYS/broker/connection/<its client id>/state,
// and once connected it publishes "1" there: bifrost accepts both, a subscriber of
// $SYS/broker/connection/# sees the state retained, and the will tells it the bridge is
// gone when Mosquitto dies.
func TestMosquittoDefaultBridgeToBifrost(t *testing.T) {
	for _, tc := range []struct{ name, extra string }{
		{"mqttv311", ""},
		{"mqttv50", "bridge_protocol_version mqttv50\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr, _ := startBifrost(t)
			mq := startMosquitto(t, fmt.Sprintf("connection tobif\naddress %s\nremote_clientid mq-default\n%s"+
				"topic loop/# both 1\n", addr, tc.extra))
			lpub, local := client(t, addr, "local", true, "loop/#")
			rpub, remote := client(t, mq.addr(), "remote", true, "loop/#")
			probe(t, rpub, "loop/probe-in", local)
			probe(t, lpub, "loop/probe-out", remote)

			const topic = "$SYS/broker/connection/mq-default/state"
			_, states := client(t, addr, "watcher", true, "$SYS/broker/connection/#")
			testenv.WaitFor(t, "the bridge's state 1, retained, on "+topic, func() bool {
				return states.on(topic, "1", true)
			})
			mq.stop(syscall.SIGKILL) // no DISCONNECT: bifrost publishes the will
			testenv.WaitFor(t, "the bridge's will 0 on "+topic, func() bool {
				return states.on(topic, "0", false)
			})
			_, later := client(t, addr, "later", true, "$SYS/broker/connection/#")
			testenv.WaitFor(t, "the state 0 kept retained for a later subscriber", func() bool {
				return later.on(topic, "0", true)
			})
		})
	}
}
