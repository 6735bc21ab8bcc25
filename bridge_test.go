package bifrost_test

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestBridgeStarts: a bridges block starts its bridges with the broker: their series are
// on /metrics (down, with a remote nobody listens on), a message for the remote waits in
// the queue, and Close ends them (TestMain's goleak checks that nothing is left).
func TestBridgeStarts(t *testing.T) {
	remote := testenv.FreePort(t, false) // a port nothing listens on
	cfg := testConfig(t)
	cfg.Bridges = []bifrost.Bridge{{Name: "up", Address: remote, ClientID: "site.up",
		Topics: []bifrost.BridgeTopic{{Pattern: "s/#", Direction: bifrost.BridgeBoth, QoS: 1}}}}
	b, _ := start(t, cfg)
	testenv.WaitFor(t, "bridge series on /metrics", func() bool {
		_, body, err := get(t, b.HTTPAddr(), "/metrics")
		return err == nil && strings.Contains(body, `bifrost_bridge_up{bridge="up"} 0`) &&
			strings.Contains(body, `bifrost_bridge_queue_depth{bridge="up"} 0`)
	})
	if err := b.Publish("s/x", []byte("kept for the remote"), 1, false); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the message queued for the remote", func() bool {
		_, body, err := get(t, b.HTTPAddr(), "/metrics")
		return err == nil && strings.Contains(body, `bifrost_bridge_queue_depth{bridge="up"} 1`)
	})
}
