package bridge

import (
	"fmt"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestRetainCrosses: a retained message published here while the bridge is up is sent
// to the remote retained (the tap's subscriptions are Retain As Published), so the
// remote keeps it for subscribers that come later.
func TestRetainCrosses(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			mq := startMosquitto(t, "")
			_, addr, _ := startBifrost(t, bridgeConf("up", mq.addr(), proto,
				conf.BridgeTopic{Pattern: "r/#", Direction: conf.BridgeOut, QoS: 1}))
			_, remote := client(t, mq.addr(), "remote-sub", true, "r/#")
			pub, _ := client(t, addr, "local", true, "")
			probe(t, pub, "r/probe", remote)
			retainedAcross(t, pub, "r/x", mq.addr(), remote)
		})
	}
}

// TestMosquittoBridgeRetain: a Mosquitto bridge (3.1.1, try_private) subscribed here
// gets a retained message with its retain flag (bifrost treats the marked client's
// subscriptions as Retain As Published), so Mosquitto retains it too.
func TestMosquittoBridgeRetain(t *testing.T) {
	_, addr, _ := startBifrost(t)
	mq := startMosquitto(t, fmt.Sprintf("connection tobif\naddress %s\nbridge_protocol_version mqttv311\n"+
		"try_private true\ncleansession true\nremote_clientid mq-bridge\nrestart_timeout 1\nnotifications false\n"+
		"topic r/# in 1\n", addr))
	_, remote := client(t, mq.addr(), "remote-sub", true, "r/#")
	pub, _ := client(t, addr, "local", true, "")
	probe(t, pub, "r/probe", remote)
	retainedAcross(t, pub, "r/x", mq.addr(), remote)
}

// retainedAcross publishes a retained message through pub, then a plain one behind it
// that remote (a subscriber on the remote) must see, and checks that a client
// subscribing on the remote afterwards gets the first as a retained message.
func retainedAcross(t *testing.T, pub paho.Client, topic, remoteAddr string, remote *inbox) {
	t.Helper()
	tok := pub.Publish(topic, 1, true, "kept")
	if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
	publish(t, pub, topic, 1, "after")
	testenv.WaitFor(t, "the message behind the retained one on the remote", func() bool { return remote.count("after") > 0 })
	_, late := client(t, remoteAddr, "late", true, topic)
	testenv.WaitFor(t, "the retained message for a late subscriber on the remote", func() bool { return late.count("kept") > 0 })
	if !late.retained("kept") {
		t.Error("the late subscriber got the message without its retain flag")
	}
}
