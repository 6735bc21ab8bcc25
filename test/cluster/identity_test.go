//go:build unix

package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestIdentityHandOver: the session's owner travels with it in the hand-over. alice's
// persistent session alice-dev, with messages queued, lives on n1; bob, whose ACL denies
// alice/#, connects with alice-dev on n3, which claims the id and gets the session from
// n1. discard: bob starts clean (Session Present 0) and gets nothing of alice's; refuse:
// bob is refused with 0x85, and alice, back on n2, finds her session and her messages.
func TestIdentityHandOver(t *testing.T) {
	var passwd string
	for _, u := range []string{"alice", "bob"} {
		h, err := auth.HashPassword([]byte(u+"-pw"), 4)
		if err != nil {
			t.Fatal(err)
		}
		passwd += u + ":" + h + "\n"
	}
	const acl = "user alice\ntopic readwrite alice/#\n\nuser bob\ntopic readwrite bob/#\n"
	for _, setting := range []string{"discard", "refuse"} {
		t.Run(setting, func(t *testing.T) {
			t.Parallel()
			c, _ := servingCluster(t, func(i int, k *nodeConfig) {
				// Anonymous clients too, for the harness's probes.
				k.YAML = authFiles(t, t.TempDir(), passwd, acl) + "  allow_anonymous: true\n"
				if setting != "discard" { // the default
					k.YAML += "  foreign_session: " + setting + "\n"
				}
			})
			home, back, away := c.nodes[0], c.nodes[1], c.nodes[2]
			alice := idLogin(t, home, "alice-dev", "alice", false)
			alice.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("alice/#"), QoS: 1}}}, packet.SUBACK)
			_ = alice.Send(&packet.Disconnect{})
			pub := mustLogin(t, home, "alice-pub", "alice", "alice-pw")
			for i := 1; i <= 3; i++ {
				pub.Expect(t, &packet.Publish{Topic: []byte("alice/x"), Payload: []byte(fmt.Sprint("m", i)), QoS: 1, PacketID: uint16(i)}, packet.PUBACK)
			}

			bob := mqtttest.DialRaw(t, away.mqttAddr())
			ack, err := bob.Connect(idConnect("alice-dev", "bob"))
			if err != nil {
				t.Fatal(err)
			}
			if setting == "refuse" {
				if ack.Code != packet.ClientIdentifierNotValid {
					t.Fatalf("bob's CONNECT on %s: %v, want 0x85", away.name, ack.Code)
				}
				alice = idLogin(t, back, "alice-dev", "alice", true)
				for i := 1; i <= 3; i++ {
					p, err := alice.Read(5 * time.Second)
					pp, ok := p.(*packet.Publish)
					if err != nil || !ok || string(pp.Payload) != fmt.Sprint("m", i) {
						t.Fatalf("alice's message %d on %s: %v %v", i, back.name, p, err)
					}
					_ = alice.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: pp.PacketID})
				}
				return
			}
			if ack.Code != packet.Success || ack.SessionPresent {
				t.Fatalf("bob's CONNECT on %s: %v, session present %v; want a clean session", away.name, ack.Code, ack.SessionPresent)
			}
			// What a resumed session sends comes right after CONNACK: the SUBACK first
			// proves there was none.
			if got := bob.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("bob/#"), QoS: 1}}}, packet.SUBACK); got == nil {
				t.Fatal("no SUBACK")
			}
		})
	}
}

// idConnect is a persistent 5.0 CONNECT of id as user.
func idConnect(id, user string) *packet.Connect {
	p := persistent(id)
	p.UsernameFlag, p.Username = true, []byte(user)
	p.PasswordFlag, p.Password = true, []byte(user+"-pw")
	return p
}

// idLogin connects id persistently as user to nd, failing unless accepted with Session
// Present as present.
func idLogin(t *testing.T, nd *node, id, user string, present bool) *mqtttest.Raw {
	t.Helper()
	c := mqtttest.DialRaw(t, nd.mqttAddr())
	ack, err := c.Connect(idConnect(id, user))
	if err != nil || ack.Code != packet.Success || ack.SessionPresent != present {
		t.Fatalf("%s: CONNECT of %s as %s: %+v %v; want Success, session present %v", nd.name, id, user, ack, err, present)
	}
	return c
}
