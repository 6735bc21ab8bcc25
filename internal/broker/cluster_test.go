package broker

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// redirector is a Cluster that redirects to to; its client ids are claimed in a fake
// cluster of one node (cluster_owner_test.go).
type redirector struct {
	*fakeNode
	to string
}

func (r *redirector) Redirect() string { return r.to }

// TestRedirect: while the cluster names another node, an MQTT 5 CONNECT is answered with
// 0x9C (Use another server) and that node as Server Reference, and no session is made;
// a 3.1.1 client, which cannot be told where to go, is served; once the cluster names
// none, MQTT 5 clients are served again.
func TestRedirect(t *testing.T) {
	b := benchBroker(t)
	r := &redirector{fakeNode: &fakeNode{c: newFakeCluster(), name: "a", serving: true}, to: "127.0.0.1:18830"}
	b.cluster = r
	c := &benchConn{}
	b.OnOpen(c)
	b.OnData(c, (&packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("c")}).AppendTo(nil, packet.V5))
	if cl := c.Value().(*client); cl.s != nil || !cl.closing {
		t.Fatal("a redirected client got a session")
	}
	h, n, err := packet.ParseHeader(c.last, packet.V5)
	if err != nil || n == 0 || h.Type != packet.CONNACK {
		t.Fatalf("answer % x is no CONNACK", c.last)
	}
	var ack packet.Connack
	if err := ack.Decode(h, c.last[n:h.Size()], packet.V5); err != nil {
		t.Fatal(err)
	}
	if ack.Code != packet.UseAnotherServer || string(ack.Props.ServerReference) != r.to {
		t.Fatalf("CONNACK %v with Server Reference %q; want %v with %q", ack.Code, ack.Props.ServerReference, packet.UseAnotherServer, r.to)
	}
	if _, ack := dialC(t, b, packet.V311, "old", nil); ack.Code != packet.Success {
		t.Fatalf("3.1.1 CONNACK %+v", ack)
	}
	r.to = ""
	if _, ack := dialC(t, b, packet.V5, "new", nil); ack.Code != packet.Success {
		t.Fatalf("CONNACK %+v once no node is named", ack)
	}
}
