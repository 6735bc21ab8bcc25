package cluster

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
	"github.com/eclipse/paho.golang/paho"
)

// Retained messages across the cluster: set or cleared on any node, they are what every
// node serves to new subscribers, exact and wildcard.

// retMarker is the marker topic of the retained tests' "ret/#" subscriptions.
const retMarker = "ret/marker"

// sameRet reports whether got and want hold the same messages; the expiry left is
// compared as "has one" only (it counts down).
func sameRet(got, want map[string]retMsg) bool {
	return maps.EqualFunc(got, want, func(a, b retMsg) bool {
		return a.Payload == b.Payload && a.QoS == b.QoS && a.ContentType == b.ContentType &&
			a.User == b.User && (a.Expiry == 0) == (b.Expiry == 0)
	})
}

func showRet(m map[string]retMsg) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%+v ", k, m[k])
	}
	return b.String()
}

// wantRetained checks at once what a new subscriber to filter on nd gets.
func wantRetained(t *testing.T, nd *node, filter, marker string, want map[string]retMsg) {
	t.Helper()
	if got := retainedOn(t, nd, filter, marker); !sameRet(got, want) {
		t.Fatalf("%s, %q: retained %s; want %s", nd.name, filter, showRet(got), showRet(want))
	}
}

// waitRetained waits until a new subscriber to filter on nd gets want.
func waitRetained(t *testing.T, nd *node, filter, marker string, want map[string]retMsg) {
	t.Helper()
	var got map[string]retMsg
	testenv.WaitFor(t, fmt.Sprintf("%s to serve %q as %s (last %s)", nd.name, filter, showRet(want), "…"), func() bool {
		got = retainedOn(t, nd, filter, marker)
		return sameRet(got, want)
	})
}

// TestRetainedEverywhere: a retained message set on n1 (QoS 1, with v5 properties) is
// served by n1 as soon as its PUBACK is in, and by n2 and n3 to new subscribers, exact
// and wildcard; cleared on n3, it is gone on n3 at once and then everywhere.
func TestRetainedEverywhere(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")

	pub := retDial(t, n1)
	pub.publish(t, &paho.Publish{Topic: "ret/a/1", QoS: 1, Retain: true, Payload: []byte("one"),
		Properties: &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "k", Value: "v"}}}})
	want := map[string]retMsg{"ret/a/1": {Payload: "one", QoS: 1, ContentType: "text/plain", User: "k=v"}}
	wantRetained(t, n1, "ret/a/1", "ret/a/1", want) // the PUBACK waited for n1 to apply it
	wantRetained(t, n1, "ret/+/1", "ret/marker/1", want)
	for _, nd := range []*node{n2, n3} {
		waitRetained(t, nd, "ret/#", retMarker, want)
		wantRetained(t, nd, "ret/a/1", "ret/a/1", want)
	}

	clr := retDial(t, n3)
	clr.publish(t, &paho.Publish{Topic: "ret/a/1", QoS: 1, Retain: true})
	none := map[string]retMsg{}
	wantRetained(t, n3, "ret/#", retMarker, none)
	for _, nd := range []*node{n1, n2} {
		waitRetained(t, nd, "ret/#", retMarker, none)
		wantRetained(t, nd, "ret/a/1", "ret/a/1", none)
	}
}

// TestRetainedExpiry: a retained message with a message expiry is served everywhere with
// the expiry left, then nowhere once it has passed, and the leader's removal takes it
// out of every node's retained set (the gauge goes to 0: no node removes it itself).
func TestRetainedExpiry(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	n2 := c.node("n2")
	pub := retDial(t, n2)
	exp := uint32(2)
	pub.publish(t, &paho.Publish{Topic: "ret/exp", QoS: 1, Retain: true, Payload: []byte("soon"),
		Properties: &paho.PublishProperties{MessageExpiry: &exp}})
	pub.publish(t, &paho.Publish{Topic: "ret/stays", QoS: 1, Retain: true, Payload: []byte("here")})
	want := map[string]retMsg{"ret/exp": {Payload: "soon", QoS: 1, Expiry: 2}, "ret/stays": {Payload: "here", QoS: 1}}
	got := retainedOn(t, n2, "ret/#", retMarker)
	if !sameRet(got, want) || got["ret/exp"].Expiry > 2 {
		t.Fatalf("n2 right after the PUBACK: %s; want %s with at most 2s left", showRet(got), showRet(want))
	}
	stays := map[string]retMsg{"ret/stays": {Payload: "here", QoS: 1}}
	for _, nd := range c.nodes {
		waitRetained(t, nd, "ret/#", retMarker, stays)
	}
	for _, nd := range c.nodes {
		testenv.WaitFor(t, nd.name+" holding 1 retained message", func() bool {
			v, ok := nd.metric("bifrost_retained_messages_current")
			return ok && v == 1
		})
	}
}

// setRetained publishes want's messages (QoS 1, retained) from clients on the nodes in
// turn.
func setRetained(t *testing.T, nodes []*node, msgs map[string]string) {
	t.Helper()
	clients := make([]*retClient, len(nodes))
	for i, nd := range nodes {
		clients[i] = retDial(t, nd)
	}
	i := 0
	for topic, payload := range msgs {
		clients[i%len(clients)].publish(t, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)})
		i++
	}
}

func retWant(msgs map[string]string) map[string]retMsg {
	out := map[string]retMsg{}
	for topic, p := range msgs {
		if p != "" {
			out[topic] = retMsg{Payload: p, QoS: 1}
		}
	}
	return out
}

// TestRetainedLateAndRestart: a node killed (-9) and restarted on its data directory
// serves the set as it is now, changes made while it was down included (a topic cleared
// meanwhile is gone though its own store had it); a node that joins late serves it too.
func TestRetainedLateAndRestart(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	n1, n3 := c.node("n1"), c.node("n3")
	msgs := map[string]string{}
	for i := range 30 {
		msgs[fmt.Sprintf("ret/t/%d", i)] = fmt.Sprintf("v%d", i)
	}
	setRetained(t, c.nodes, msgs)
	for _, nd := range c.nodes {
		waitRetained(t, nd, "ret/#", retMarker, retWant(msgs))
	}

	n3.kill()
	down := map[string]string{}
	for i := range 5 {
		down[fmt.Sprintf("ret/t/%d", i)] = ""                      // cleared
		down[fmt.Sprintf("ret/new/%d", i)] = fmt.Sprintf("n%d", i) // new
	}
	setRetained(t, []*node{n1, c.node("n2")}, down)
	maps.Copy(msgs, down)
	want := retWant(msgs)
	waitRetained(t, n1, "ret/#", retMarker, want) // some went through n2

	n3.start()
	c.waitFormed()
	waitRetained(t, n3, "ret/#", retMarker, want)

	late := c.add("n4", nodeConfig{BootstrapExpect: 3, Seeds: n1.cfg.Seeds})
	late.start()
	c.waitFormed()
	waitRetained(t, late, "ret/#", retMarker, want)
	wantRetained(t, late, "ret/new/+", "ret/new/marker", retWant(down))
}

// TestRetainedConverge: many retained topics set and cleared concurrently by clients on
// every node (QoS 0, 1 and 2, the same topics from every node) end as the same set on
// every node.
func TestRetainedConverge(t *testing.T) {
	const (
		perNode   = 3  // publishers on each node
		perClient = 60 // retained publishes each
		topics    = 40
	)
	c := newCluster(t, 3, nil)
	c.start()
	c.waitFormed()
	var clients []*retClient
	for _, nd := range c.nodes {
		for range perNode {
			clients = append(clients, retDial(t, nd))
		}
	}
	errs := make(chan error, len(clients))
	for ci, cl := range clients {
		go func() {
			ctx, cancel := retCtx()
			defer cancel()
			for i := range perClient {
				p := &paho.Publish{Topic: fmt.Sprintf("ret/c/%d", (ci*7+i)%topics), QoS: byte(i % 3), Retain: true,
					Payload: []byte(fmt.Sprintf("c%d-%d", ci, i))}
				if i%9 == 8 {
					p.Payload = nil // a clear
				}
				if _, err := cl.c.Publish(ctx, p); err != nil {
					errs <- err
					return
				}
			}
			// A QoS 1 PUBACK after them: every change before it is applied on this node.
			_, err := cl.c.Publish(ctx, &paho.Publish{Topic: "ret/done", QoS: 1, Payload: []byte("x")})
			errs <- err
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var sets []map[string]retMsg
	testenv.WaitFor(t, "every node serving the same retained set", func() bool {
		sets = sets[:0]
		for _, nd := range c.nodes {
			sets = append(sets, retainedOn(t, nd, "ret/c/#", "ret/c/marker"))
		}
		return len(sets[0]) > 0 && maps.Equal(sets[0], sets[1]) && maps.Equal(sets[0], sets[2])
	})
	t.Logf("%d topics retained on every node, the same messages", len(sets[0]))
	// Changes that arrive together share a Raft entry.
	var changes, entries float64
	for _, nd := range c.nodes {
		ch, ok1 := nd.metric(`bifrost_cluster_retained_changes_total{what="changes"}`)
		en, ok2 := nd.metric(`bifrost_cluster_retained_changes_total{what="entries"}`)
		if !ok1 || !ok2 {
			t.Fatalf("%s: no retained changes metric", nd.name)
		}
		changes, entries = changes+ch, entries+en
	}
	t.Logf("%v retained changes in %v Raft entries", changes, entries)
	if changes < perNode*3*perClient || entries >= changes {
		t.Errorf("%v changes in %v entries; want at least %d changes, batched", changes, entries, perNode*3*perClient)
	}
	for topic, m := range sets[0] {
		if !strings.HasPrefix(m.Payload, "c") {
			t.Errorf("topic %s holds %+v", topic, m)
		}
	}
}
