//go:build unix

package cluster

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
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

// TestIdentityRefuseLive: bob's CONNECT with the client id of alice's live connection on
// another node is refused there, 0x85 (3.1.1: return code 2), and alice's connection is
// left alone: she is not taken over and goes on receiving. foreign_session: refuse keeps
// the claim from taking the id from her (the ownership table knows whose it is); a
// client_ids binding refuses bob before any claim.
func TestIdentityRefuseLive(t *testing.T) {
	var passwd string
	for _, u := range []string{"alice", "bob"} {
		h, err := auth.HashPassword([]byte(u+"-pw"), 4)
		if err != nil {
			t.Fatal(err)
		}
		passwd += u + ":" + h + "\n"
	}
	const acl = "user alice\ntopic readwrite alice/#\n\nuser bob\ntopic readwrite bob/#\n"
	// probe-*: the harness's CONNECTs that wait for a node to serve.
	for _, setting := range []string{"foreign_session: refuse", `client_ids: ["%u", "%u-*", "probe-*"]`} {
		t.Run(setting[:strings.Index(setting, ":")], func(t *testing.T) {
			t.Parallel()
			c, _ := servingCluster(t, func(i int, k *nodeConfig) {
				k.YAML = authFiles(t, t.TempDir(), passwd, acl) + "  allow_anonymous: true\n  " + setting + "\n"
			})
			home, pubNode, away := c.nodes[0], c.nodes[1], c.nodes[2]
			alice := idLogin(t, home, "alice-dev", "alice", false)
			alice.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("alice/#"), QoS: 1}}}, packet.SUBACK)
			pub := mustLogin(t, pubNode, "alice-pub", "alice", "alice-pw")

			// Twice on the other nodes, 5.0 and 3.1.1, and once on alice's own.
			for i, nd := range []*node{away, pubNode, home} {
				claimed, refused := claimCounts(t, nd)
				bob := mqtttest.DialRaw(t, nd.mqttAddr())
				if i == 1 {
					if code := connect311(t, bob, idConnect("alice-dev", "bob")); code != packet.ConnRefusedIdentifierRejected {
						t.Fatalf("bob's 3.1.1 CONNECT on %s: return code %d, want 2", nd.name, code)
					}
				} else {
					ack, err := bob.Connect(idConnect("alice-dev", "bob"))
					if err != nil || ack.Code != packet.ClientIdentifierNotValid {
						t.Fatalf("bob's CONNECT on %s: %+v %v, want 0x85", nd.name, ack, err)
					}
				}
				// Nothing taken: refused by the ownership table, or before any claim.
				wantRefused := refused
				if strings.HasPrefix(setting, "foreign_session") {
					wantRefused++
				}
				if c, r := claimCounts(t, nd); c != claimed || r != wantRefused {
					t.Fatalf("%s's claims after bob's CONNECT: %v taken, %v refused; want %v, %v", nd.name, c, r, claimed, wantRefused)
				}
				m := fmt.Sprint("m", i)
				pub.Expect(t, &packet.Publish{Topic: []byte("alice/x"), Payload: []byte(m), QoS: 1, PacketID: uint16(i + 1)}, packet.PUBACK)
				p, err := alice.Read(testenv.Timeout)
				pp, ok := p.(*packet.Publish)
				if err != nil || !ok || string(pp.Payload) != m {
					t.Fatalf("alice on %s after bob's CONNECT on %s: %v %v; want the PUBLISH %s (her connection left alone)", home.name, nd.name, p, err, m)
				}
				_ = alice.Send(&packet.Ack{PacketType: packet.PUBACK, PacketID: pp.PacketID})
			}
		})
	}
}

// claimCounts returns nd's client ids claimed and claims refused for another identity's
// (bifrost_cluster_claims_total).
func claimCounts(t *testing.T, nd *node) (claimed, refused float64) {
	t.Helper()
	claimed, ok := nd.metric(`bifrost_cluster_claims_total{what="client_ids"}`)
	refused, ok2 := nd.metric(`bifrost_cluster_claims_total{what="refused_foreign"}`)
	if !ok || !ok2 {
		t.Fatalf("%s: no bifrost_cluster_claims_total", nd.name)
	}
	return claimed, refused
}

// connect311 sends p as a 3.1.1 CONNECT on c and returns the CONNACK's return code.
func connect311(t *testing.T, c *mqtttest.Raw, p *packet.Connect) byte {
	t.Helper()
	p.Version, p.KeepAlive, p.Props = packet.V311, 60, packet.Properties{}
	if _, err := c.Conn.Write(p.AppendTo(nil, packet.V311)); err != nil {
		t.Fatal(err)
	}
	var ack [4]byte
	_ = c.Conn.SetReadDeadline(time.Now().Add(testenv.Timeout))
	if _, err := io.ReadFull(c.Conn, ack[:]); err != nil || ack[0] != 0x20 || ack[1] != 2 {
		t.Fatalf("3.1.1 CONNACK: % x %v", ack, err)
	}
	return ack[3]
}
