package interop

import (
	"slices"
	"strconv"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Topic filters: wildcards, $-topics, overlapping and shared subscriptions.
var topicScenarios = []scenario{
	{name: "topics/wildcards", run: testWildcards},
	{name: "topics/dollar", run: testDollarTopics},
	{name: "topics/overlapping", run: testOverlapping},
	{name: "topics/shared", run: testShared},
	{name: "topics/shared-redelivery", run: testSharedRedelivery},
}

// testWildcards: each filter gets exactly the topics it matches (spec 4.7): '#' matches
// the parent level too [MQTT-4.7.1-2], '+' one whole level, empty levels included.
func testWildcards(t *testing.T, e *env) {
	topics := []string{"sport", "sport/", "sport/tennis", "sport/tennis/player1",
		"sport/tennis/player1/ranking", "sports", "/finance", "a//b"}
	cases := []struct {
		filter string
		want   []string
	}{
		{"#", topics},
		{"sport/#", []string{"sport", "sport/", "sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"sport/tennis/player1/#", []string{"sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"sport/tennis/+", []string{"sport/tennis/player1"}},
		{"sport/+", []string{"sport/", "sport/tennis"}},
		{"+", []string{"sport", "sports"}},
		{"+/+", []string{"sport/", "sport/tennis", "/finance"}},
		{"/+", []string{"/finance"}},
		{"+/tennis/#", []string{"sport/tennis", "sport/tennis/player1", "sport/tennis/player1/ranking"}},
		{"a/+/b", []string{"a//b"}},
		{"sport/tennis", []string{"sport/tennis"}},
	}
	subs := make([]client, len(cases))
	for i, c := range cases {
		subs[i] = e.connect(t, clean(e.id("wild")))
		subs[i].sub(t, 1, c.filter, "end/marker")
	}
	pub := e.connect(t, clean("pub"))
	for _, tp := range topics {
		pub.pub(t, tp, 1, false, tp)
	}
	pub.pub(t, "end/marker", 1, false, "")
	for i, c := range cases {
		t.Run(c.filter, func(t *testing.T) {
			var got []string
			for _, m := range subs[i].inbox().until(t, "end/marker") {
				got = append(got, m.Topic)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// testDollarTopics: filters starting with a wildcard do not match topics starting with $
// [MQTT-4.7.2-1]; a filter naming the $ level does. Clients' publications to $SYS are
// accepted and not routed ($SYS belongs to the broker).
func testDollarTopics(t *testing.T, e *env) {
	cases := []struct {
		filter string
		want   []string
	}{
		{"#", nil},
		{"+/x", nil},
		{"+/+", nil},
		{"$app/#", []string{"$app/x"}},
		{"$app/+", []string{"$app/x"}},
		{"$SYS/#", nil},
	}
	subs := make([]client, len(cases))
	for i, c := range cases {
		subs[i] = e.connect(t, clean(e.id("dollar")))
		subs[i].sub(t, 1, c.filter, "$end/marker")
	}
	pub := e.connect(t, clean("pub"))
	pub.pub(t, "$app/x", 1, false, "app")
	pub.pub(t, "$SYS/fake", 1, false, "sys")
	pub.pub(t, "$end/marker", 1, false, "")
	for i, c := range cases {
		t.Run(c.filter, func(t *testing.T) {
			var got []string
			for _, m := range subs[i].inbox().until(t, "$end/marker") {
				got = append(got, m.Topic)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// testOverlapping: a message matching several subscriptions of one client is delivered
// once, at the highest QoS granted, carrying in 5.0 every matching subscription
// identifier [MQTT-3.3.4-2], [MQTT-3.3.4-3], [MQTT-3.3.4-4].
func testOverlapping(t *testing.T, e *env) {
	pub := e.connect(t, clean("pub"))
	if !e.v5() {
		s := e.connect(t, clean("sub"))
		s.sub(t, 1, "ov/+")
		s.sub(t, 2, "ov/#")
		s.sub(t, 0, "ov/a")
		s.sub(t, 1, "end/marker")
		pub.pub(t, "ov/a", 2, false, "x")
		pub.pub(t, "end/marker", 1, false, "")
		got := s.inbox().until(t, "end/marker")
		if len(got) != 1 || got[0].QoS != 2 {
			t.Fatalf("got %+v, want one delivery at QoS 2", got)
		}
		return
	}
	r := e.raw(t)
	r.session("sub", false, nil)
	r.subscribe(1, 1, 1, "ov/+")
	r.subscribe(2, 2, 2, "ov/#")
	r.subscribe(3, 0, 3, "ov/a")
	r.subscribe(4, 1, 0, "ov/b") // no identifier
	r.subscribe(5, 1, 0, "end/marker")
	pub.pub(t, "ov/a", 2, false, "x")
	pub.pub(t, "ov/b", 1, false, "y")
	pub.pub(t, "end/marker", 1, false, "")

	// The three PUBLISHes come in order; acknowledging them afterwards keeps the acks'
	// answers out of their way.
	a, b := r.expectPublish("ov/a", "x"), r.expectPublish("ov/b", "y")
	marker := r.expectPublish("end/marker", "")
	for _, c := range []struct {
		p   *packet.Publish
		qos byte
		ids []uint32
	}{
		{a, 2, []uint32{1, 2, 3}},
		// ov/b matches ov/+ (id 1), ov/# (id 2) and ov/b (no id): QoS 1 from two of them.
		{b, 1, []uint32{1, 2}},
		{marker, 1, nil},
	} {
		ids := slices.Sorted(slices.Values(c.p.Props.SubscriptionIDs))
		if c.p.QoS != c.qos || !slices.Equal(ids, c.ids) {
			t.Fatalf("%s: QoS %d with subscription ids %v, want QoS %d with %v", c.p.Topic, c.p.QoS, ids, c.qos, c.ids)
		}
	}
	r.send(&packet.Ack{PacketType: packet.PUBREC, PacketID: a.PacketID})
	r.expectAck(packet.PUBREL, a.PacketID)
	r.send(&packet.Ack{PacketType: packet.PUBCOMP, PacketID: a.PacketID})
	r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: b.PacketID})
	r.send(&packet.Ack{PacketType: packet.PUBACK, PacketID: marker.PacketID})
	r.none()
}

// testShared: a shared subscription's messages are shared out among its members, each to
// exactly one (spec 4.8.2), while a plain subscription to the same topics gets them all.
func testShared(t *testing.T, e *env) {
	const members, n = 3, 30
	var group []client
	for range members {
		c := e.connect(t, clean(e.id("member")))
		c.sub(t, 1, "$share/g/sh/#")
		group = append(group, c)
	}
	plain := e.connect(t, clean("plain"))
	plain.sub(t, 1, "sh/#")
	pub := e.connect(t, clean("pub"))
	for i := range n {
		pub.pub(t, "sh/t", 1, false, strconv.Itoa(i))
	}
	if got := plain.inbox().take(t, n); len(got) != n {
		t.Fatalf("plain subscription got %d", len(got))
	}
	seen := map[string]int{}
	counts := make([]int, members)
	drain(t, func() bool {
		for i, c := range group {
			select {
			case m := <-c.inbox().ch:
				seen[m.Payload]++
				counts[i]++
				return true
			default:
			}
		}
		return false
	}, func() bool { return len(seen) == n })
	for _, c := range group {
		c.inbox().none(t)
	}
	for p, k := range seen {
		if k != 1 {
			t.Errorf("message %s delivered %d times", p, k)
		}
	}
	for i, k := range counts {
		if k < n/members/2 {
			t.Errorf("member %d got %d of %d messages: %v is not balanced", i, k, n, counts)
		}
	}
}

// testSharedRedelivery: QoS 1 messages a member received through a shared subscription
// and did not acknowledge go to another member when its connection ends (spec 4.8.2).
func testSharedRedelivery(t *testing.T, e *env) {
	const n = 6
	r := e.raw(t)
	r.session("silent", false, nil)
	r.subscribe(1, 1, 0, "$share/g/rd/t")
	other := e.connect(t, clean("other"))
	other.sub(t, 1, "$share/g/rd/t")
	pub := e.connect(t, clean("pub"))
	for i := range n {
		pub.pub(t, "rd/t", 1, false, strconv.Itoa(i))
	}
	// The broker shares the messages out between the members; the raw one acknowledges
	// none of those it gets.
	var unacked []string
	seen := map[string]bool{}
	drain(t, func() bool {
		select {
		case p := <-r.in:
			unacked = append(unacked, string(p.(*packet.Publish).Payload))
			return true
		case m := <-other.inbox().ch:
			seen[m.Payload] = true
			return true
		default:
			return false
		}
	}, func() bool { return len(unacked)+len(seen) == n })
	if len(unacked) == 0 {
		t.Fatal("the raw member got no message to leave unacknowledged")
	}
	r.drop()
	for range unacked {
		m := other.inbox().next(t)
		if seen[m.Payload] {
			t.Fatalf("message %s delivered twice to the remaining member", m.Payload)
		}
		seen[m.Payload] = true
	}
	for _, p := range unacked {
		if !seen[p] {
			t.Fatalf("unacknowledged message %s not redelivered", p)
		}
	}
	other.inbox().none(t)
}
