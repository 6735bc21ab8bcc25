package cluster

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/hashicorp/memberlist"
)

// TestSuspicion: a member that stops answering is suspect to the node whose probe found
// it silent, then dead. It reads memberlist's log line for a failed probe, so it fails
// when a memberlist upgrade changes that line.
func TestSuspicion(t *testing.T) {
	n1 := startNode(t, nodeConfig(t, "n1", 3))
	// The other member is a bare memberlist, which the test can silence at once.
	c := memberlist.DefaultLANConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = "n2", "127.0.0.1", 0, 0
	c.Delegate = metaDelegate(appendMeta(nil, Meta{Protocol: protocolVersion, RPC: "127.0.0.1:1"}))
	c.LogOutput = testWriter{t}
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if _, err := ml.Join([]string{n1.gossip()}); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		for _, m := range n1.Members() {
			if m.Name == "n2" {
				return m.State
			}
		}
		return ""
	}
	testenv.WaitFor(t, "n1 sees n2 alive", func() bool { return state() == "alive" })
	if err := ml.Shutdown(); err != nil { // silent, without a leave message
		t.Fatal(err)
	}
	testenv.WaitFor(t, "n1 suspects n2", func() bool { return state() == "suspect" })
	testenv.WaitFor(t, "n1 declares n2 dead", func() bool { return state() == "dead" })
}

// metaDelegate is a memberlist delegate that advertises fixed metadata.
type metaDelegate []byte

func (d metaDelegate) NodeMeta(int) []byte                  { return d }
func (metaDelegate) NotifyMsg([]byte)                       {}
func (metaDelegate) GetBroadcasts(int, int) [][]byte        { return nil }
func (metaDelegate) LocalState(bool) []byte                 { return nil }
func (metaDelegate) MergeRemoteState(buf []byte, join bool) {}

// testWriter sends a log to t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
