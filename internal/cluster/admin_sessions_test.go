package cluster

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// sessionsHost is a host whose broker lists the sessions list gives.
type sessionsHost struct {
	nopHost
	list func(cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32)
}

func (h sessionsHost) Sessions(cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32) {
	return h.list(cursor, limit, f)
}

// TestNodeSessions: a node lists another's sessions over gRPC as that node's broker
// lists them: the cursor, the limit and the filter reach it, and every field of a
// session comes back; its own come from its own broker; an unknown node is an error.
func TestNodeSessions(t *testing.T) {
	since := time.Date(2026, 11, 26, 21, 0, 0, 123, time.UTC)
	remote := broker.SessionInfo{ClientID: "dev-1", Username: "alice", Online: true, Persistent: true, Protocol: "5.0",
		Listener: "mqtt", Address: "10.0.0.7:50000", KeepAlive: 30, ConnectedSince: since, Inflight: 2, Queued: 5,
		ExpiryInterval: 3600}
	var mu sync.Mutex
	var asked []any
	lister := func(page []broker.SessionInfo, next uint32) sessionsHost {
		return sessionsHost{list: func(cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, cursor, limit, f)
			return page, next
		}}
	}
	n1 := startNode(t, nodeConfig(t, "n1", 2), func(c *Cluster) { c.Attach(lister([]broker.SessionInfo{{ClientID: "here"}}, 0)) })
	n2 := startNode(t, nodeConfig(t, "n2", 2, n1.gossip()), func(c *Cluster) { c.Attach(lister([]broker.SessionInfo{remote}, 42)) })
	waitFormed(t, n1, n2)
	if got := n1.SessionNodes(); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("SessionNodes = %v", got)
	}
	f := broker.SessionFilter{Online: true, Prefix: "dev-", Username: "alice", Listener: "mqtt", Persistent: true}
	var page []broker.SessionInfo
	var next uint32
	testenv.WaitFor(t, "n2's sessions listed on n1", func() bool {
		var err error
		page, next, err = n1.NodeSessions(context.Background(), "n2", 7, 3, f)
		return err == nil
	})
	if len(page) != 1 || !reflect.DeepEqual(page[0], remote) || next != 42 {
		t.Errorf("n2's page: %+v next %d; want %+v next 42", page, next, remote)
	}
	mu.Lock()
	if len(asked) < 3 || asked[len(asked)-3] != uint32(7) || asked[len(asked)-2] != 3 || asked[len(asked)-1] != f {
		t.Errorf("n2's broker was asked %v; want cursor 7, limit 3, %+v", asked, f)
	}
	mu.Unlock()
	if page, _, err := n1.NodeSessions(context.Background(), "n1", 0, 10, f); err != nil || len(page) != 1 || page[0].ClientID != "here" {
		t.Errorf("n1's own: %+v %v", page, err)
	}
	if _, _, err := n1.NodeSessions(context.Background(), "n9", 0, 10, f); err == nil || !strings.Contains(err.Error(), "n9") {
		t.Errorf("an unknown node: %v; want an error naming it", err)
	}
}

// BenchmarkNodeSessions: a page of another node's sessions over gRPC on loopback, from
// the ask to the decoded page; the other node's broker is a fixed page, so the figure is
// the call and the encoding.
func BenchmarkNodeSessions(b *testing.B) {
	for _, limit := range []int{100, 1000} {
		b.Run(fmt.Sprintf("Page=%d", limit), func(b *testing.B) {
			page := make([]broker.SessionInfo, limit)
			for i := range page {
				page[i] = broker.SessionInfo{ClientID: fmt.Sprintf("sensor-%06d", i), Username: "fleet", Online: true,
					Protocol: "5.0", Listener: "mqtt", Address: "10.1.2.3:40000", KeepAlive: 60,
					ConnectedSince: time.Now().UTC(), ExpiryInterval: 3600}
			}
			nodes := benchNodes(b, func(c *Cluster, _ string) {
				c.Attach(sessionsHost{list: func(uint32, int, broker.SessionFilter) ([]broker.SessionInfo, uint32) { return page, 1 }})
			})
			b.ReportAllocs()
			for b.Loop() {
				got, _, err := nodes[0].NodeSessions(context.Background(), "n2", 1, limit, broker.SessionFilter{})
				if err != nil || len(got) != limit {
					b.Fatalf("%d sessions, %v", len(got), err)
				}
			}
		})
	}
}
