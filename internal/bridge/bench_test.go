package bridge

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// BenchmarkBridgeQoS1 carries b.N QoS 1 messages over a bridge on loopback: a publisher
// on the local broker, a QoS 1 subscriber on the remote Mosquitto, and reports messages
// per second from the first publish to the last arrival. Bridge=bifrost is bifrost's
// bridge (5.0 and 3.1.1); Bridge=mosquitto a Mosquitto bridge between two Mosquittos,
// with the same clients, for reference. Run with a fixed count:
//
//	go test -run '^$' -bench BridgeQoS1 -benchtime 20000x ./internal/bridge
func BenchmarkBridgeQoS1(b *testing.B) {
	for _, proto := range protocols {
		b.Run("Bridge=bifrost/"+proto, func(b *testing.B) {
			mq := startMosquitto(b, "max_inflight_messages 100\n")
			bc := bridgeConf("up", mq.addr(), proto, conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
			bc.QueueMessages, bc.QueueBytes = 1<<22, 1<<30
			_, addr, set := startBifrost(b, bc)
			benchBridge(b, addr, mq.addr())
			if st := set.Bridges()[0].Stats(); st.Dropped != 0 {
				b.Fatalf("dropped: %+v", st)
			}
		})
	}
	b.Run("Bridge=mosquitto/3.1.1", func(b *testing.B) {
		remote := startMosquitto(b, "max_inflight_messages 100\n")
		local := startMosquitto(b, fmt.Sprintf("max_inflight_messages 100\nconnection up\naddress %s\n"+
			"bridge_protocol_version mqttv311\ncleansession true\nrestart_timeout 1\nnotifications false\n"+
			"topic q/# out 1\n", remote.addr()))
		benchBridge(b, local.addr(), remote.addr())
	})
}

// benchBridge publishes b.N messages to local in bursts of 1,000 awaiting their
// PUBACKs, and waits until the subscriber on remote has them all.
func benchBridge(b *testing.B, local, remote string) {
	var got atomic.Int64
	in := &inbox{}
	c, _ := client(b, remote, "bench-sub", true, "")
	if tok := c.Subscribe("q/#", 1, func(_ paho.Client, m paho.Message) {
		if string(m.Payload()) == "probe" {
			in.add(nil, m)
			return
		}
		got.Add(1)
	}); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
		b.Fatal(tok.Error())
	}
	pub, _ := client(b, local, "bench-pub", true, "")
	testenv.WaitFor(b, "the bridge", func() bool {
		publish(b, pub, "q/probe", 0, "probe")
		return in.count("probe") > 0
	})
	payload := make([]byte, 64)
	b.ResetTimer()
	start := time.Now()
	const burst = 1000
	for sent := 0; sent < b.N; {
		toks := make([]paho.Token, 0, burst)
		for ; len(toks) < burst && sent < b.N; sent++ {
			toks = append(toks, pub.Publish("q/"+strconv.Itoa(sent%16), 1, false, payload))
		}
		for _, tok := range toks {
			if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
				b.Fatal(tok.Error())
			}
		}
	}
	testenv.WaitFor(b, "every message on the remote", func() bool { return got.Load() >= int64(b.N) })
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
