package cluster

import (
	"log/slog"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestRefreshRedirect: a node above redirect_load sends new clients to the least loaded
// live member of its cluster below the threshold; never to itself, a suspect, a leaving
// member, one of another cluster or one without an MQTT address; and nowhere when none
// qualifies or its own load is at or below the threshold.
func TestRefreshRedirect(t *testing.T) {
	c, err := New(Options{Config: &conf.Cluster{NodeName: "self", RedirectLoad: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	id := "c1"
	c.fileID.Store(&id)
	c.ms = newMembership("self", slog.New(slog.DiscardHandler), nil, c.localMeta, c.ClusterID, nil)
	member := func(name string, load float64, edit func(*Member)) {
		m := Member{Name: name, State: "alive", Meta: Meta{MQTT: name + ":1883", ClusterID: id, Load: load}}
		if edit != nil {
			edit(&m)
		}
		c.ms.live[name] = m
	}
	member("self", 0.1, nil)
	member("suspect", 0.01, nil)
	c.ms.suspect["suspect"] = true
	member("leaving", 0.01, func(m *Member) { m.Meta.Leaving = true })
	member("foreign", 0.01, func(m *Member) { m.Meta.ClusterID = "c2" })
	member("nomqtt", 0.01, func(m *Member) { m.Meta.MQTT = "" })
	member("busy", 0.6, nil)
	member("light", 0.3, nil)
	member("lighter", 0.2, nil)

	for _, tc := range []struct {
		own  float64
		want string
	}{{0.5, ""}, {0.7, "lighter:1883"}, {1, "lighter:1883"}} {
		c.refreshRedirect(tc.own)
		if got := c.Redirect(); got != tc.want {
			t.Errorf("own load %v: Redirect() = %q; want %q", tc.own, got, tc.want)
		}
	}
	delete(c.ms.live, "light")
	delete(c.ms.live, "lighter")
	if c.refreshRedirect(0.9); c.Redirect() != "" {
		t.Errorf("Redirect() = %q with no member below the threshold", c.Redirect())
	}
}
