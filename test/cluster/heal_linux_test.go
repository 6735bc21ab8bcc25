package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/paho"
)

// After a partition heals: routes, retained messages and client-id ownership converge.
// Five nodes in the network lab cut two | three, the minority two followers (or the
// leader and a follower), so that each side has company and both sides change state.

// healLab starts a formed cluster of n processes on a netLab, each with the given
// cluster.lease (a long one keeps the minority's clients served through a cut).
func healLab(t *testing.T, n int, lease string) (lab *netLab, c *testCluster, id, leader string) {
	lab = newNetLab(t)
	d, err := time.ParseDuration(lease)
	if err != nil {
		t.Fatal(err)
	}
	c = newNetCluster(t, lab, n, func(_ int, cfg *nodeConfig) {
		// A take-over from an unreachable node waits out the lease before its CONNACK:
		// the claim's timeout and the connect timeout above it (docs/cluster-owner.md).
		cfg.ClusterYAML += fmt.Sprintf("    lease: %v\n    claim_timeout: %v\n", d, d+10*time.Second)
		cfg.YAML += fmt.Sprintf("mqtt:\n  connect_timeout: %v\n", d+20*time.Second)
	})
	c.start()
	id, leader = c.waitFormed()
	return lab, c, id, leader
}

// labClient connects an MQTT 5 client (paho) with client id id to nd through the lab.
func labClient(t *testing.T, nd *node, id string) *mqtttest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := nd.dialer()(ctx, "tcp", nd.mqttAddr())
	if err != nil {
		t.Fatal(err)
	}
	return mqtttest.Open(t, conn, id)
}

// seeDead reports whether every node of observers sees every node of targets dead.
func seeDead(observers, targets []*node) bool {
	for _, o := range observers {
		s, err := o.status()
		if err != nil {
			return false
		}
		for _, nd := range targets {
			if m, ok := s.member(nd.name); !ok || m.State != "dead" {
				return false
			}
		}
	}
	return true
}

// names returns the names of nodes.
func names(nodes []*node) []string {
	out := make([]string, len(nodes))
	for i, nd := range nodes {
		out[i] = nd.name
	}
	return out
}

// waitRoutes waits until every node of c holds, for every other node, as many routes in
// its remote index (bifrost_cluster_routes{peer}) as that node has filters in want.
func waitRoutes(t *testing.T, c *testCluster, want map[*node][]string) {
	t.Helper()
	var last []string
	ok := waitUntil(func() bool {
		last = last[:0]
		for _, nd := range c.nodes {
			for _, peer := range c.nodes {
				if peer == nd {
					continue
				}
				v, found := nd.metric(fmt.Sprintf(`bifrost_cluster_routes{peer=%q}`, peer.name))
				if !found || int(v) != len(want[peer]) {
					last = append(last, fmt.Sprintf("%s holds %v routes of %s (found %v), want %d", nd.name, v, peer.name, found, len(want[peer])))
				}
			}
		}
		return len(last) == 0
	})
	if !ok {
		t.Fatalf("the nodes' route tables do not agree with the subscriptions:\n%s", strings.Join(last, "\n"))
	}
}

// checkDelivery publishes, from a new client on every node in turn, one QoS 1 message to
// each topic of topics(nd) for every node nd, then the marker end/<nd>; each node's
// subscriber subs[nd] must get exactly the messages of want(nd, topic), once each.
func checkDelivery(t *testing.T, c *testCluster, subs map[*node]*mqtttest.Client, when string, topics func(*node) []string, want func(*node, string) bool) {
	t.Helper()
	for _, from := range c.nodes {
		pub := labClient(t, from, fmt.Sprintf("pub-%s-%d", from.name, time.Now().UnixNano()))
		for _, to := range c.nodes {
			for _, topic := range topics(to) {
				pub.Pub(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(from.name)})
			}
			pub.Pub(t, &paho.Publish{Topic: "end/" + to.name, QoS: 1, Payload: []byte(from.name)})
		}
		for _, to := range c.nodes {
			got := map[string]int{}
			for _, m := range until(t, subs[to], "end/"+to.name, fmt.Sprintf("%s: published on %s, the subscriber on %s", when, from.name, to.name)) {
				if m.Payload != from.name {
					t.Errorf("%s: the subscriber on %s got %s from %s; want only messages of %s", when, to.name, m.Topic, m.Payload, from.name)
				}
				got[m.Topic]++
			}
			for _, topic := range topics(to) {
				n := 0
				if want(to, topic) {
					n = 1
				}
				if got[topic] != n {
					t.Errorf("%s: published on %s, %s reached the subscriber on %s %d times; want %d", when, from.name, topic, to.name, got[topic], n)
				}
			}
		}
		_ = pub.Paho.Disconnect(&paho.Disconnect{})
	}
}

// TestHealRoutes: five nodes cut into a minority of two followers and a majority of
// three, twice, each client connected before the cut (a CONNECT needs a claim in Raft,
// which the minority cannot make; a lease of 120 s keeps the minority's clients served
// through the cuts). After each heal, waiting on the metrics, every node holds every
// other's routes (bifrost_cluster_routes{peer}), and a message published on any node
// reaches exactly the subscribers that exist, once each.
//
//   - The first cut heals as soon as the majority has declared the minority dead, with no
//     route change anywhere: the minority, slower to declare the majority dead (its
//     suspicions have one confirmation where the majority's have two), usually still
//     counts the majority alive, so its route streams to them never broke; the majority
//     dropped the minority's routes on the declaration all the same, and must get them
//     back.
//   - The second cut lasts until each side has declared the other dead. Right after it,
//     every subscriber unsubscribes a filter it had (the UNSUBACK does not wait for the
//     peers) and subscribes a new one, whose SUBACK waits, on both sides, until failure
//     detection declares the other side dead (or 10 s bound it, counted in
//     bifrost_cluster_route_ack_timeouts_total): docs/cluster.md, SUBACK means routed.
func TestHealRoutes(t *testing.T) {
	lab, c, id, leader := healLab(t, 5, "120s")
	var minority, majority []*node
	for _, nd := range c.nodes {
		if nd.name != leader && len(minority) < 2 {
			minority = append(minority, nd)
		} else {
			majority = append(majority, nd)
		}
	}
	t.Logf("minority %v, majority %v", names(minority), names(majority))
	subs := map[*node]*mqtttest.Client{}
	filters := map[*node][]string{}
	for _, nd := range c.nodes {
		subs[nd] = labClient(t, nd, "sub-"+nd.name)
		filters[nd] = []string{"keep/" + nd.name, "drop/" + nd.name, "end/" + nd.name}
		subs[nd].Sub(t, 1, filters[nd]...)
	}
	topics := func(nd *node) []string {
		return []string{"keep/" + nd.name, "drop/" + nd.name, "new/" + nd.name + "/x"}
	}
	subscribed := func(nd *node, topic string) bool {
		return slices.ContainsFunc(filters[nd], func(f string) bool {
			return f == topic || strings.HasSuffix(f, "/#") && strings.HasPrefix(topic, strings.TrimSuffix(f, "#"))
		})
	}
	waitRoutes(t, c, filters)
	checkDelivery(t, c, subs, "before the cuts", topics, subscribed)

	lab.partition(minority, majority)
	testenv.WaitFor(t, "the majority sees the minority dead", func() bool { return seeDead(majority, minority) })
	t.Logf("healing once the majority declared the minority dead; the minority declared the majority dead: %v", seeDead(minority, majority))
	heal(t, lab, c, id)
	waitRoutes(t, c, filters)
	checkDelivery(t, c, subs, "healed after the majority's declaration", topics, subscribed)

	timeouts := map[*node]float64{}
	for _, nd := range c.nodes {
		timeouts[nd], _ = nd.metric("bifrost_cluster_route_ack_timeouts_total")
	}
	lab.partition(minority, majority)
	subacks := make(chan string, len(c.nodes))
	for _, nd := range c.nodes {
		sub := subs[nd]
		sub.Unsub(t, "drop/"+nd.name)
		filter := "new/" + nd.name + "/#"
		filters[nd] = []string{"keep/" + nd.name, "end/" + nd.name, filter}
		other := minority
		if slices.Contains(minority, nd) {
			other = majority
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Timeout)
			defer cancel()
			_, err := sub.Paho.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
			switch v, _ := nd.metric("bifrost_cluster_route_ack_timeouts_total"); {
			case err != nil:
				subacks <- fmt.Sprintf("%s: %v", nd.name, err)
			case !seeDead([]*node{nd}, other) && v == timeouts[nd]:
				subacks <- fmt.Sprintf("%s: the SUBACK of %s came while the other side %v was not all dead and no wait timed out", nd.name, filter, names(other))
			default:
				subacks <- ""
			}
		}()
	}
	for range c.nodes {
		if msg := <-subacks; msg != "" {
			t.Error(msg)
		}
	}
	// The minority's suspicions have one confirmation at most, so they run up to six
	// times memberlist's base timeout (18.7 s with five nodes), each node on its own
	// probe schedule: longer than testenv.Timeout, bounded here.
	if !waitLong(func() bool { return seeDead(majority, minority) && seeDead(minority, majority) }) {
		t.Fatalf("the two sides did not see each other dead within %v of the SUBACKs", 3*testenv.Timeout)
	}
	heal(t, lab, c, id)
	waitRoutes(t, c, filters)
	checkDelivery(t, c, subs, "healed after a cut both sides detected", topics, subscribed)
}

// waitLong polls cond until it holds, for up to three times testenv.Timeout (a failure
// detection that may outlast one), and reports whether it held.
func waitLong(cond func() bool) bool {
	for deadline := time.Now().Add(3 * testenv.Timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// until returns what sub received before the marker, failing the test with what it got
// and who (what) it is when the marker does not come.
func until(t *testing.T, sub *mqtttest.Client, marker, what string) []mqtttest.Msg {
	t.Helper()
	var out []mqtttest.Msg
	for {
		select {
		case m := <-sub.In:
			if m.Topic == marker {
				return out
			}
			out = append(out, m)
		case <-time.After(testenv.Timeout):
			t.Fatalf("%s: no %s; got %+v", what, marker, out)
		}
	}
}

// TestHealRetained: five nodes cut into a minority of the leader and a follower and a
// majority of three, with a retained set before the cut (r/keep, r/clear, r/change).
// On the minority, right after the cut, a client sets r/minority and clears r/keep (QoS
// 1): nothing that goes through Raft succeeds there (docs/cluster-retained.md), so it
// gets no PUBACK and its connection ends: DISCONNECT 0x9C once the node's lease has run
// out, or closed when the log did not take the change (an entry the cut-off leader
// appended is never committed). On the majority, once it has a leader, a client clears
// r/clear, sets r/change again and sets r/new. Healed, every node serves new
// subscribers the majority's set, exact and wildcard filters alike, and nothing of the
// minority's attempt, and every node's replicated set has its three topics.
func TestHealRetained(t *testing.T) {
	lab, c, id, leader := healLab(t, 5, "5s")
	old := c.node(leader)
	minority := []*node{old}
	var majority []*node
	for _, nd := range c.nodes {
		if nd != old && len(minority) < 2 {
			minority = append(minority, nd)
		} else if nd != old {
			majority = append(majority, nd)
		}
	}
	t.Logf("minority %v (the leader and a follower), majority %v", names(minority), names(majority))
	retain := func(cl *mqtttest.Client, topic, payload string) {
		t.Helper()
		cl.Pub(t, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)})
	}
	before := labClient(t, majority[0], "before")
	retain(before, "r/keep", "v0")
	retain(before, "r/clear", "v0")
	retain(before, "r/change", "v0")
	attempt := dialLab(t, old)
	if ack, err := attempt.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("attempt")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("a client on %s: %v %v", old.name, ack, err)
	}

	lab.partition(minority, majority)
	for i, p := range []*packet.Publish{
		{Topic: []byte("r/minority"), Payload: []byte("m"), QoS: 1, Retain: true, PacketID: 1},
		{Topic: []byte("r/keep"), QoS: 1, Retain: true, PacketID: 2},
	} {
		if err := attempt.Send(p); err != nil {
			t.Fatalf("publish %d on the minority: %v", i, err)
		}
	}
	for {
		p, err := attempt.Read(testenv.Timeout)
		if err != nil {
			if mqtttest.IsTimeout(err) {
				t.Fatalf("the retained changes on the minority: no answer within %v; want the connection ended", testenv.Timeout)
			}
			t.Logf("the minority closed the connection that changed retained messages: %v", err)
			break
		}
		if d, ok := p.(*packet.Disconnect); ok {
			if d.Code != packet.UseAnotherServer {
				t.Errorf("the minority ended the connection with DISCONNECT %v; want 0x9C (its lease ran out) or a close", d.Code)
			}
			break
		}
		t.Errorf("the minority answered a retained change with %v; want no acknowledgement", p.Type())
	}
	c.waitFormed(majority...)
	during := labClient(t, majority[1], "during")
	retain(during, "r/clear", "")
	retain(during, "r/change", "v1")
	retain(during, "r/new", "n")

	heal(t, lab, c, id)
	if v, _ := old.metric(`bifrost_cluster_retained_changes_total{what="failed"}`); v != 2 {
		t.Errorf("healed, %s counts %v retained changes the log did not take; want the minority's 2", old.name, v)
	}
	want := map[string]string{"r/keep": "v0", "r/change": "v1", "r/new": "n"}
	exact := []string{"r/keep", "r/clear", "r/change", "r/new", "r/minority"}
	for _, nd := range c.nodes {
		if v, ok := nd.metric("bifrost_cluster_retained_topics"); !ok || int(v) != len(want) {
			t.Errorf("healed, %s's replicated set has %v topics (found %v); want %d", nd.name, v, ok, len(want))
		}
		for _, filters := range [][]string{{"r/#"}, exact} {
			sub := labClient(t, nd, "new-"+nd.name+"-"+filters[0])
			sub.Sub(t, 1, append(filters, "end")...)
			sub.Pub(t, &paho.Publish{Topic: "end", QoS: 1})
			got := map[string]string{}
			for _, m := range until(t, sub, "end", fmt.Sprintf("healed, a subscriber of %v on %s", filters, nd.name)) {
				if _, dup := got[m.Topic]; dup || !m.Retain {
					t.Errorf("healed, a subscriber of %v on %s got %s again or not retained: %+v", filters, nd.name, m.Topic, m)
				}
				got[m.Topic] = m.Payload
			}
			if !maps.Equal(got, want) {
				t.Errorf("healed, %s serves a new subscriber of %v the retained set %v; want %v", nd.name, filters, got, want)
			}
			_ = sub.Paho.Disconnect(&paho.Disconnect{})
		}
	}
}

// TestHealOwner: five nodes, a lease of 20 s (so that the minority's clients are still
// served when the cut heals), cut into a minority of two followers and a majority of
// three. Client id "dup" has a persistent session on the minority node m, subscribed to
// dup/old, connected before the cut. Once the majority has declared the minority dead,
// "dup" connects to the majority node M: its claim commits there at once and, the
// previous owner unreachable, M waits out the lease (docs/cluster-owner.md). The cut
// heals meanwhile. Then m, catching up with the log, applies M's claim and closes its
// connection of "dup" (DISCONNECT 0x8E: the fence); M answers its CONNECT after the
// lease with session present 0 (the session on m could not be asked for); exactly one
// connection of "dup" is alive, M's. Its session is where it is: "dup" subscribes to
// dup/new there, disconnects, and connects again on a third node, which takes the
// session over from M with session present 1; messages to dup/new reach it and to
// dup/old (the session left on m) do not.
func TestHealOwner(t *testing.T) {
	lab, c, id, leader := healLab(t, 5, "20s")
	var minority, majority []*node
	for _, nd := range c.nodes {
		if nd.name != leader && len(minority) < 2 {
			minority = append(minority, nd)
		} else {
			majority = append(majority, nd)
		}
	}
	m, M, third := minority[0], majority[0], majority[1]
	t.Logf("minority %v, majority %v; dup on %s, then on %s, then on %s", names(minority), names(majority), m.name, M.name, third.name)
	persistent := func(clean bool) *packet.Connect {
		return &packet.Connect{CleanStart: clean, ClientID: []byte("dup"), Props: packet.Properties{SessionExpiry: packet.Some[uint32](300)}}
	}
	old := dialLab(t, m)
	if ack, err := old.Connect(persistent(true)); err != nil || ack.Code != packet.Success {
		t.Fatalf("dup on %s: %v %v", m.name, ack, err)
	}
	rawSub(t, old, "dup/old")
	testenv.WaitFor(t, "every node routes dup/old to "+m.name, func() bool {
		for _, nd := range c.nodes {
			if v, ok := nd.metric(fmt.Sprintf(`bifrost_cluster_routes{peer=%q}`, m.name)); nd != m && (!ok || v != 1) {
				return false
			}
		}
		return true
	})

	lab.partition(minority, majority)
	testenv.WaitFor(t, "the majority sees the minority dead", func() bool { return seeDead(majority, minority) })
	lost, _ := M.metric(`bifrost_cluster_handovers_total{outcome="lost"}`)
	survivor := dialLab(t, M)
	if err := survivor.Send(persistent(false)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, M.name+" to have claimed dup and to wait out the lease of "+m.name, func() bool {
		v, _ := M.metric(`bifrost_cluster_handovers_total{outcome="lost"}`)
		return v == lost+1
	})
	if err := ping(old); err != nil {
		t.Fatalf("dup on %s, the minority, before the heal: %v; want it still served (the lease is 20 s)", m.name, err)
	}

	heal(t, lab, c, id)
	if p, err := old.Read(testenv.Timeout); !mqtttest.TakenOver(p, err) {
		t.Errorf("healed, dup on %s got %v (%v); want DISCONNECT 0x8E once %s applied %s's claim", m.name, p, err, m.name, M.name)
	}
	p, err := survivor.Read(testenv.Timeout)
	if ack, ok := p.(*packet.Connack); err != nil || !ok || ack.Code != packet.Success || ack.SessionPresent {
		t.Fatalf("dup on %s: %v (%v); want CONNACK success, session present 0 (its session on the unreachable %s is lost)", M.name, p, err, m.name)
	}
	if err := ping(survivor); err != nil {
		t.Fatalf("dup on %s: %v; want it served", M.name, err)
	}
	rawSub(t, survivor, "dup/new")
	if err := survivor.Send(&packet.Disconnect{Code: packet.NormalDisconnection}); err != nil {
		t.Fatal(err)
	}
	back := dialLab(t, third)
	if ack, err := back.Connect(persistent(false)); err != nil || ack.Code != packet.Success || !ack.SessionPresent {
		t.Fatalf("dup again on %s: %v %v; want session present 1, handed over by %s", third.name, ack, err, M.name)
	}
	rawSub(t, back, "dup/end")
	pub := labClient(t, M, "pub")
	for _, topic := range []string{"dup/old", "dup/new", "dup/end"} {
		pub.Pub(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)})
	}
	var got []string
	for {
		p, err := back.Read(testenv.Timeout)
		if err != nil {
			t.Fatalf("dup on %s: %v after %v", third.name, err, got)
		}
		pp, ok := p.(*packet.Publish)
		if !ok {
			continue
		}
		if string(pp.Topic) == "dup/end" {
			break
		}
		got = append(got, string(pp.Topic))
	}
	if !slices.Equal(got, []string{"dup/new"}) {
		t.Errorf("dup's session, taken over from %s by %s, got %v; want [dup/new] (dup/old was the session left on %s)", M.name, third.name, got, m.name)
	}
}

// rawSub subscribes c to filter at QoS 0 and waits for the SUBACK.
func rawSub(t *testing.T, c *mqtttest.Raw, filter string) {
	t.Helper()
	ack := c.Expect(t, &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte(filter)}}}, packet.SUBACK).(*packet.Suback)
	if len(ack.Codes) != 1 || ack.Codes[0] != packet.GrantedQoS0 {
		t.Fatalf("SUBSCRIBE %s: %v", filter, ack.Codes)
	}
}

// TestHealRefusedClaim: five nodes, the default lease, cut into a minority of two
// followers and a majority of three. A CONNECT of client id "ghost" on the minority node
// m waits for its claim, which no leader takes; when m fences itself (0.8 × lease) it
// refuses the CONNECT, and the claim fails with it. Meanwhile "ghost" connects on the
// majority node M and is served. Healed, m's claim must not be applied after all (it
// would take the id from M's live connection, DISCONNECT 0x8E, for a client m refused):
// m logs the claim as failed, and M's connection of "ghost" is still served.
func TestHealRefusedClaim(t *testing.T) {
	lab, c, id, leader := healLab(t, 5, "5s")
	var minority, majority []*node
	for _, nd := range c.nodes {
		if nd.name != leader && len(minority) < 2 {
			minority = append(minority, nd)
		} else {
			majority = append(majority, nd)
		}
	}
	m, M := minority[0], majority[0]
	t.Logf("minority %v, majority %v; ghost on %s, then on %s", names(minority), names(majority), m.name, M.name)
	lab.partition(minority, majority)
	refused := dialLab(t, m)
	if err := refused.Send(&packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("ghost"), KeepAlive: 60}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the majority sees the minority dead", func() bool { return seeDead(majority, minority) })
	live := dialLab(t, M)
	if ack, err := live.Connect(&packet.Connect{CleanStart: true, ClientID: []byte("ghost")}); err != nil || ack.Code != packet.Success {
		t.Fatalf("ghost on %s: %v %v", M.name, ack, err)
	}
	p, err := refused.Read(testenv.Timeout)
	if ack, ok := p.(*packet.Connack); err != nil || !ok || ack.Code != packet.ServerUnavailable && ack.Code != packet.UseAnotherServer {
		t.Fatalf("ghost on %s, the minority: %v (%v); want its CONNECT refused once the node fenced itself", m.name, p, err)
	}

	heal(t, lab, c, id)
	testenv.WaitFor(t, m.name+" to log ghost's claim as failed", func() bool {
		return strings.Contains(m.logs(), `msg="cluster: client id not claimed; refusing the connect" client=ghost`)
	})
	if p, err := live.Read(0); !mqtttest.IsTimeout(err) {
		t.Errorf("healed, ghost on %s got %v (%v); want nothing: the claim of the CONNECT %s refused was applied", M.name, p, err, m.name)
	}
	if err := ping(live); err != nil {
		t.Errorf("healed, ghost on %s: %v; want it served", M.name, err)
	}
}
