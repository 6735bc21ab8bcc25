package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// TestDeniedAtExit: with the read ACL narrowed while messages wait (Limits.MayRead now
// denies "deny/..."), nothing it denies leaves the session: not the window sent again on
// a reconnect, not a resend that waited for room in a smaller window, not the queue
// pumped into the window. Each is dropped and reported as acl_denied by the call that
// dropped it (Attach, Ack), for the broker to count and log; a released entry (PUBREC
// received) still gets its PUBREL.
func TestDeniedAtExit(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%v", v), func(t *testing.T) {
			lim := testLimits()
			narrowed := false
			lim.MayRead = func(user string, realm uint8, cid string, topic []byte) bool {
				if user != "alice" || realm != 2 || cid != "client" {
					t.Errorf("MayRead(%q, %d, %q): not the session's owner", user, realm, cid)
				}
				return !narrowed || !strings.HasPrefix(string(topic), "deny/")
			}
			info := ConnectInfo{Version: v, ClientRecvMax: 4, Username: "alice", Realm: 2}
			s, c := online(t, lim, info)
			for i, topic := range []string{"deny/1", "ok/2", "deny/3", "deny/4", "deny/5", "ok/6"} {
				qos := uint8(1)
				if i == 2 {
					qos = 2
				}
				deliver(t, s, Delivery{Msg: msg(topic, fmt.Sprint(i+1)), QoS: qos}, at(0), Delivered)
			}
			s.Flush()
			ack(s, packet.PUBREC, 3, packet.Success) // deny/3 released: only its PUBREL is left
			c.take()

			narrowed = true
			info.ClientRecvMax = 2 // deny/4's resend waits for room
			c, dropped := reconnectDrops(t, s, c, info, at(0))
			equalLines(t, "resumed", c.lines(t, v), []string{
				`PUBLISH "ok/2" q1 id2 dup "2"`,
				`PUBREL id3`,
			})
			if dropped != (Drops{DropDenied: 1}) {
				t.Errorf("Attach dropped %q, want acl_denied=1: deny/1 resent", dropped)
			}
			dropped = ack(s, packet.PUBCOMP, 3, packet.Success)
			equalLines(t, "after PUBCOMP", c.lines(t, v), []string{`PUBLISH "ok/6" q1 id5 "6"`})
			if dropped != (Drops{DropDenied: 2}) {
				t.Errorf("Ack dropped %q, want acl_denied=2: deny/4 waiting, deny/5 queued", dropped)
			}
			if in, q := s.Pending(); in != 2 || q != 0 {
				t.Errorf("Pending() = %d, %d; want 2, 0 (ok/2 and ok/6 in flight)", in, q)
			}
		})
	}
}
