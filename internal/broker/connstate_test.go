package broker

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// aclAuthorizer is the Auth of an ACL file with these lines, for the broker's Authorizer.
func aclAuthorizer(t *testing.T, lines string) auth.Authorizer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(conf.Auth{ACLFile: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestConnectionStateWill: a will on $SYS/broker/connection/<id>/state, a Mosquitto
// bridge's notification, is accepted from a client that names its own client id and
// carries the bridge marker, or without an ACL; else as the ACL says (Mosquitto's rule
// "pattern write $SYS/broker/connection/%c/state"). Other $SYS wills stay refused.
func TestConnectionStateWill(t *testing.T) {
	const own, other = "$SYS/broker/connection/br/state", "$SYS/broker/connection/other/state"
	plain := "topic readwrite loop/#\n"
	withRule := plain + "pattern write $SYS/broker/connection/%c/state\n"
	for _, tc := range []struct {
		name   string
		acl    string // "" no ACL
		v      packet.Version
		bridge bool
		topic  string
		want   packet.ReasonCode
	}{
		{"no ACL/marked/own", "", packet.V311, true, own, packet.Success},
		{"no ACL/5.0/own", "", packet.V5, false, own, packet.Success},
		{"no ACL/3.1.1/own", "", packet.V311, false, own, packet.Success},
		{"no ACL/marked/other", "", packet.V311, true, other, packet.NotAuthorized},
		{"no ACL/5.0/other", "", packet.V5, false, other, packet.NotAuthorized},
		{"no ACL/marked/not a state", "", packet.V311, true, "$SYS/broker/connection/br/up", packet.NotAuthorized},
		{"no ACL/marked/nested id", "", packet.V311, true, "$SYS/broker/connection/br/x/state", packet.NotAuthorized},
		{"ACL/marked/own", plain, packet.V311, true, own, packet.Success},
		{"ACL/5.0/own", plain, packet.V5, false, own, packet.NotAuthorized},
		{"ACL/marked/other", plain, packet.V311, true, other, packet.NotAuthorized},
		{"ACL rule/5.0/own", withRule, packet.V5, false, own, packet.Success},
		{"ACL rule/5.0/other", withRule, packet.V5, false, other, packet.NotAuthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sec Security
			if tc.acl != "" {
				sec.Authorizer = aclAuthorizer(t, tc.acl)
			}
			b := authBroker(t, sec)
			c := &authTestConn{}
			b.OnOpen(c)
			b.OnData(c, (&packet.Connect{Version: tc.v, Bridge: tc.bridge, CleanStart: true, ClientID: []byte("br"),
				WillFlag: true, WillTopic: []byte(tc.topic), WillPayload: []byte("0"), WillQoS: 1, WillRetain: true}).AppendTo(nil, tc.v))
			ps := c.packets(t, tc.v)
			if len(ps) != 1 {
				t.Fatalf("answers %v, want one CONNACK", types(ps))
			}
			if ack := ps[0].(*packet.Connack); ack.Code != tc.want {
				t.Fatalf("CONNACK %v, want %v", ack.Code, tc.want)
			}
		})
	}
}

// TestConnectionStateRouted: a bridge's state, published by it and then its will, reaches
// subscribers of $SYS/broker/connection/# and is retained; a client's PUBLISH elsewhere
// under $SYS, or on another client's state, is acknowledged and dropped.
func TestConnectionStateRouted(t *testing.T) {
	const topic = "$SYS/broker/connection/br/state"
	b := benchBroker(t)
	br := &authTestConn{}
	b.OnOpen(br)
	b.OnData(br, (&packet.Connect{Version: packet.V311, Bridge: true, CleanStart: true, ClientID: []byte("br"),
		WillFlag: true, WillTopic: []byte(topic), WillPayload: []byte("0"), WillQoS: 1, WillRetain: true}).AppendTo(nil, packet.V311))
	watch := &authTestConn{}
	b.OnOpen(watch)
	b.OnData(watch, connectPacket(packet.V5, "watcher", "", ""))
	b.OnData(watch, (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
		{Filter: []byte("$SYS/broker/connection/#"), QoS: 1}}}).AppendTo(nil, packet.V5))
	watch.waitPackets(t, packet.V5, 2) // CONNACK, SUBACK

	for i, p := range []string{"$SYS/broker/connection/other/state", "$SYS/broker/connection/br/other", topic} {
		b.OnData(br, (&packet.Publish{Topic: []byte(p), QoS: 1, PacketID: uint16(i + 1), Retain: true, Payload: []byte("1")}).AppendTo(nil, packet.V311))
	}
	br.waitPackets(t, packet.V311, 4) // CONNACK, three PUBACKs
	ps := watch.packets(t, packet.V5) // OnData delivered and flushed before it returned
	if len(ps) != 3 {
		t.Fatalf("watcher got %v, want only the bridge's own state", types(ps[2:]))
	}
	if p := ps[2].(*packet.Publish); string(p.Topic) != topic || string(p.Payload) != "1" {
		t.Fatalf("watcher got %q %q, want %s 1", p.Topic, p.Payload, topic)
	}
	if n := b.retained.tree.Len(); n != 1 {
		t.Fatalf("%d retained messages, want the state alone", n)
	}

	b.OnClose(br, io.EOF) // connection lost: the will
	ps = watch.waitPackets(t, packet.V5, 4)
	if p := ps[3].(*packet.Publish); string(p.Topic) != topic || string(p.Payload) != "0" {
		t.Fatalf("will %q %q, want %s 0", p.Topic, p.Payload, topic)
	}
	late := &authTestConn{}
	b.OnOpen(late)
	b.OnData(late, connectPacket(packet.V5, "late", "", ""))
	b.OnData(late, (&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
		{Filter: []byte(topic)}}}).AppendTo(nil, packet.V5))
	ps = late.waitPackets(t, packet.V5, 3)
	if p := ps[2].(*packet.Publish); !p.Retain || string(p.Payload) != "0" {
		t.Fatalf("late subscriber got %+v, want the retained 0", p)
	}
}
