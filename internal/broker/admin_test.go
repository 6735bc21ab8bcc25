package broker

import (
	"slices"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/store"
)

// TestAdminSessions: the admin API's listing selects by prefix, connection, persistence
// and username, pages with a cursor that visits each session once, shows one session's
// subscriptions, and Kick closes a connection with the reason code given.
func TestAdminSessions(t *testing.T) {
	b := storeBroker(t, store.NewMemory(), nil)
	a1 := dialT(t, b, packet.V5, "a1", func(c *packet.Connect) { c.UsernameFlag, c.Username = true, []byte("ann") })
	a1.subscribe(1, 1, "t/#")
	dialT(t, b, packet.V311, "a2", nil)
	b1 := dialT(t, b, packet.V5, "b1", persist(300))
	b1.drop()

	ids := func(page []SessionInfo) []string {
		var out []string
		for _, in := range page {
			out = append(out, in.ClientID)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name string
		f    SessionFilter
		want []string
	}{
		{"all", SessionFilter{}, []string{"a1", "a2", "b1"}},
		{"prefix", SessionFilter{Prefix: "a"}, []string{"a1", "a2"}},
		{"online", SessionFilter{Online: true}, []string{"a1", "a2"}},
		{"persistent", SessionFilter{Persistent: true}, []string{"b1"}},
		{"username", SessionFilter{Username: "ann"}, []string{"a1"}},
		{"none", SessionFilter{Prefix: "zz"}, nil},
	} {
		page, next := b.Sessions(0, 100, tc.f)
		if got := ids(page); !slices.Equal(got, tc.want) || next != 0 {
			t.Errorf("%s: %v, next %d; want %v, 0", tc.name, got, next, tc.want)
		}
	}

	var all []SessionInfo
	cursor, pages := uint32(0), 0
	for {
		page, next := b.Sessions(cursor, 1, SessionFilter{})
		all, pages = append(all, page...), pages+1
		if next == 0 || pages > 10 {
			break
		}
		cursor = next
	}
	if got := ids(all); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
		t.Errorf("pages of 1: %v", got)
	}

	in, ok := b.Session("a1")
	if !ok || !in.Online || in.Protocol != "5.0" || in.Username != "ann" || in.KeepAlive != 60 ||
		in.ConnectedSince.IsZero() || len(in.Subscriptions) != 1 || in.Subscriptions[0].Filter != "t/#" ||
		in.Subscriptions[0].QoS != 1 {
		t.Errorf("a1's detail: %+v, %v", in, ok)
	}
	if in, ok := b.Session("b1"); !ok || in.Online || !in.Persistent || in.ExpiryInterval != 300 {
		t.Errorf("b1's detail: %+v, %v", in, ok)
	}
	if _, ok := b.Session("nobody"); ok {
		t.Error("a session of nobody")
	}

	if b.Kick("b1", packet.AdministrativeAction) {
		t.Error("kicked b1, which is not connected")
	}
	if !b.Kick("a1", packet.AdministrativeAction) {
		t.Fatal("a1 not kicked")
	}
	equalLines(t, "a1", a1.lines(), []string{"DISCONNECT rc=0x98"})
	if !a1.c.shutdown.Load() {
		t.Error("a1's connection is open")
	}
}
