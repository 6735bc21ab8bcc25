package bridge

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

func TestMatches(t *testing.T) {
	cases := []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/+/c", "a//c", true},
		{"a", "a/b", false},
		{"a/b/c", "a/b", false},
	}
	for _, c := range cases {
		if got := matches(c.filter, c.topic); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.filter, c.topic, got, c.want)
		}
	}
}

// TestPrefixes follows the table of mosquitto.conf(5) for local and remote prefixes.
func TestPrefixes(t *testing.T) {
	rs := newRoutes([]conf.BridgeTopic{
		{Pattern: "pattern", Direction: "both", LocalPrefix: "L/", RemotePrefix: "R/"},
		{Pattern: "only-local", Direction: "both", LocalPrefix: "L/"},
		{Pattern: "only-remote", Direction: "both", RemotePrefix: "R/"},
		{Pattern: "s/#", Direction: "out"},
		{Pattern: "c/#", Direction: "in"},
	})
	out := []struct{ local, remote string }{
		{"L/pattern", "R/pattern"},
		{"L/only-local", "only-local"},
		{"only-remote", "R/only-remote"},
		{"s/1/t", "s/1/t"},
	}
	for _, c := range out {
		if got, ok := toRemote(rs, c.local); !ok || got != c.remote {
			t.Errorf("toRemote(%q) = %q %v, want %q", c.local, got, ok, c.remote)
		}
		if c.local != "s/1/t" {
			if got, ok := toLocal(rs, c.remote); !ok || got != c.local {
				t.Errorf("toLocal(%q) = %q %v, want %q", c.remote, got, ok, c.local)
			}
		}
	}
	if _, ok := toRemote(rs, "c/1"); ok {
		t.Error("an in-only topic went out")
	}
	if _, ok := toLocal(rs, "s/1"); ok {
		t.Error("an out-only topic came in")
	}
}
