package broker

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// redirector is a Cluster that redirects to to.
type redirector struct {
	noRoutes
	to string
}

func (r *redirector) Redirect() string { return r.to }

// TestRedirect: while the cluster names another node, an MQTT 5 CONNECT is answered with
// 0x9C (Use another server) and that node as Server Reference, and no session is made;
// a 3.1.1 client, which cannot be told where to go, is served; once the cluster names
// none, MQTT 5 clients are served again.
func TestRedirect(t *testing.T) {
	b := benchBroker(t)
	r := &redirector{to: "127.0.0.1:18830"}
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
	connect(t, b, "old", packet.V311)
	r.to = ""
	connect(t, b, "new", packet.V5)
}
