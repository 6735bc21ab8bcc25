package broker

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// TestMatchClientID: %u is the user name, never an anonymous one; a trailing * any
// suffix, none included; the rest literal.
func TestMatchClientID(t *testing.T) {
	for _, c := range []struct {
		pattern, cid, user string
		want               bool
	}{
		{"%u", "alice", "alice", true},
		{"%u", "alice-dev", "alice", false},
		{"%u", "alice", "bob", false},
		{"%u-*", "alice-dev", "alice", true},
		{"%u-*", "alice-", "alice", true},
		{"%u-*", "alice", "alice", false},
		{"%u-*", "alice-dev", "bob", false},
		{"%u-*", "-dev", "", false}, // anonymous: %u matches nothing
		{"%u", "", "", false},
		{"dev-%u", "dev-alice", "alice", true},
		{"dev-%u", "dev-alice2", "alice", false},
		{"%u/%u", "a/a", "a", true},
		{"sensor-*", "sensor-7", "", true},
		{"sensor-*", "sensor-7", "alice", true},
		{"sensor-*", "sensor", "", false},
		{"*", "anything", "", true},
	} {
		if got := matchClientID(c.pattern, c.cid, c.user); got != c.want {
			t.Errorf("matchClientID(%q, %q, %q) = %v, want %v", c.pattern, c.cid, c.user, got, c.want)
		}
	}
}

// TestIDRulesAssigned: a client id the broker assigned is exempt from the binding; without
// patterns every id is allowed.
func TestIDRulesAssigned(t *testing.T) {
	r := &idRules{patterns: []string{"%u-*"}}
	if !r.allows("bifrost-ABC", "alice", true) || r.allows("bifrost-ABC", "alice", false) {
		t.Error("an assigned id must pass, the same id sent by the client must not")
	}
	if !(&idRules{}).allows("x", "", false) {
		t.Error("no patterns: every id passes")
	}
}

// TestUnownedSession: a session restored without an owner (a record of the store's
// format 1) is resumed by no identity, whichever foreign_session says: the first CONNECT
// of its client id, even an anonymous one, starts clean and gets nothing it had queued;
// its records are replaced by the new owner's.
func TestUnownedSession(t *testing.T) {
	for _, setting := range []string{conf.ForeignDiscard, conf.ForeignRefuse} {
		t.Run(setting, func(t *testing.T) {
			st := store.NewMemory()
			var bt store.Batch
			bt.PutMessage(1, store.MessageRecord{Topic: []byte("a/x"), Payload: []byte("old"), QoS: 1})
			bt.PutSession(store.SessionRecord{ClientID: "dev", Expiry: store.NeverExpire, Version: 4,
				Subscriptions: []store.SubRecord{{Filter: "a/#", QoS: 1}}})
			bt.PutQueued("dev", 1, store.QueuedRecord{MessageID: 1, QoS: 1, State: store.StateQueued})
			done := make(chan error, 1)
			st.Commit(&bt, func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			b := storeBroker(t, st, func(c *conf.Config) { c.Auth.ForeignSession = setting })
			c := openT(t, b, packet.V311, "dev", persist(0))
			b.commitWait()
			ack, ok := c.next().(*packet.Connack)
			if !ok || ack.Code != packet.Success || ack.SessionPresent {
				t.Fatalf("CONNACK %+v; want success, no session present", ack)
			}
			c.publish(1, 1, false, "a/y", "new") // no subscription left: nobody gets it
			b.commitWait()
			if got := c.lines(); len(got) != 1 || got[0] != "PUBACK 1" {
				t.Fatalf("after the CONNACK: %v; want the PUBACK alone", got)
			}
			r, ok := loadDump(t, st).sessions["dev"]
			if !ok || !r.Owned || r.Username != "" || len(r.Subscriptions) != 0 {
				t.Fatalf("stored session %+v (%v); want the new owner's, anonymous, no subscriptions", r, ok)
			}
		})
	}
}
