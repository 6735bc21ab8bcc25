package bridge

import (
	"fmt"
	"testing"
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
