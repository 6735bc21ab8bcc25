package broker

import "testing"

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
