package cluster

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/hashicorp/memberlist"
)

// TestRefuseWrongKey: gossip that a node's secret does not decrypt, from a memberlist
// with another key and from one with none, is a refusal: counted, and logged once per
// stranger with its address. It reads memberlist's log lines for such gossip, so it fails
// when a memberlist upgrade changes them.
func TestRefuseWrongKey(t *testing.T) {
	k := nodeConfig(t, "n1", 1)
	k.Secret = "the right secret 0123456789"
	n1 := startNode(t, k)
	for _, tc := range []struct {
		name string
		key  []byte
	}{
		{"another key", gossipKey("another secret 0123456789")},
		{"no key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := n1.ms.refusalCount()
			c := memberlist.DefaultLANConfig()
			c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = "stranger", "127.0.0.1", 0, 0
			c.SecretKey = tc.key
			c.LogOutput = testWriter{t}
			ml, err := memberlist.Create(c)
			if err != nil {
				t.Fatal(err)
			}
			defer ml.Shutdown()
			if _, err := ml.Join([]string{n1.gossip()}); err == nil {
				t.Fatal("a stranger joined")
			}
			testenv.WaitFor(t, "the refusal counted", func() bool { return n1.ms.refusalCount() > before })
		})
	}
	if n := strings.Count(n1.logs.String(), `msg="cluster: refused a node" addr=127.0.0.1:`); n != 1 {
		// Both strangers came from 127.0.0.1: one line within refusalLogEvery.
		t.Errorf("the refusals of two strangers from one address logged %d times; want once:\n%s", n, n1.logs)
	}
	if strings.Contains(n1.logs.String(), "level=ERROR") {
		t.Errorf("memberlist's own lines for the strangers were logged as errors:\n%s", n1.logs)
	}
}
