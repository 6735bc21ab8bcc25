package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// fakeCluster is nodes of fakeBrokers; a node in down does not answer.
type fakeCluster struct {
	nodes map[string]*fakeBroker
	down  map[string]bool
}

func (c *fakeCluster) SessionNodes() []string {
	var out []string
	for name := range c.nodes {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func (c *fakeCluster) NodeSessions(_ context.Context, node string, cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32, error) {
	if c.down[node] {
		return nil, 0, errors.New(node + ": connection refused")
	}
	page, next := c.nodes[node].Sessions(cursor, limit, f)
	return page, next, nil
}

// newClusterAPI serves the API of a node of three, n1 to n3, with 3, 0 and 4 sessions.
func newClusterAPI(t *testing.T) (*httptest.Server, *fakeCluster) {
	t.Helper()
	fc := &fakeCluster{nodes: map[string]*fakeBroker{}, down: map[string]bool{}}
	for name, n := range map[string]int{"n1": 3, "n2": 0, "n3": 4} {
		fb := &fakeBroker{}
		for i := range n {
			fb.sessions = append(fb.sessions, broker.SessionInfo{ClientID: fmt.Sprintf("%s-c%d", name, i), Online: true, Protocol: "5.0"})
		}
		fc.nodes[name] = fb
	}
	mux := http.NewServeMux()
	Register(mux, Options{Broker: fc.nodes["n1"], Cluster: fc, Access: &auth.AdminAccess{}, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, fc
}

// walk pages through query with the cursors it is given and returns "node/client" of
// each item, the unavailable nodes each page named, and the number of pages.
func walk(t *testing.T, srv *httptest.Server, query string) (got, unavailable []string, pages int) {
	t.Helper()
	next := ""
	for pages = 1; pages < 50; pages++ {
		url := srv.URL + "/api/v1/clients?" + query
		if next != "" {
			url += "&cursor=" + next
		}
		code, body := call(t, "GET", url, nil)
		if code != 200 {
			t.Fatalf("%s: %d %v", url, code, body)
		}
		for _, d := range body["data"].([]any) {
			m := d.(map[string]any)
			got = append(got, fmt.Sprint(m["node"], "/", m["client_id"]))
		}
		if u, ok := body["unavailable"].([]any); ok {
			for _, n := range u {
				unavailable = append(unavailable, n.(map[string]any)["node"].(string))
			}
		}
		n, ok := body["next"].(string)
		if !ok {
			return got, unavailable, pages
		}
		next = n
	}
	t.Fatalf("%s: no end after %d pages", query, pages)
	return nil, nil, 0
}

// TestClusterListing: on a cluster the listing of every node pages through each client
// exactly once, each item naming its node, with pages filled across nodes; a node filter
// lists that node's alone; a node that does not answer is named in the page that passes
// it (and is a 503 when it is the one asked for); a cursor whose node left goes on with
// the next; bad nodes and cursors are JSON errors.
func TestClusterListing(t *testing.T) {
	srv, fc := newClusterAPI(t)
	all := []string{"n1/n1-c0", "n1/n1-c1", "n1/n1-c2", "n3/n3-c0", "n3/n3-c1", "n3/n3-c2", "n3/n3-c3"}
	for _, limit := range []int{1, 2, 3, 7, 100} {
		got, down, pages := walk(t, srv, fmt.Sprintf("limit=%d", limit))
		if !slices.Equal(got, all) || len(down) != 0 {
			t.Errorf("limit %d: %v, unavailable %v; want %v", limit, got, down, all)
		}
		if want := (len(all) + limit - 1) / limit; pages > want+1 {
			t.Errorf("limit %d: %d pages; want at most %d", limit, pages, want+1)
		}
	}
	if got, _, _ := walk(t, srv, "limit=2&node=n3"); !slices.Equal(got, all[3:]) {
		t.Errorf("node=n3: %v", got)
	}
	if got, _, _ := walk(t, srv, "limit=2&client_id_prefix=n3-c1"); !slices.Equal(got, []string{"n3/n3-c1"}) {
		t.Errorf("a prefix across the cluster: %v", got)
	}

	fc.down["n1"] = true
	got, down, _ := walk(t, srv, "limit=2")
	if !slices.Equal(got, all[3:]) || !slices.Equal(down, []string{"n1"}) {
		t.Errorf("n1 down: %v, unavailable %v; want n3's and n1 named once", got, down)
	}
	if code, body := call(t, "GET", srv.URL+"/api/v1/clients?node=n1", nil); code != 503 || !strings.Contains(fmt.Sprint(body["error"]), "connection refused") {
		t.Errorf("node=n1 while down: %d %v; want a JSON 503 saying why", code, body)
	}
	fc.down["n1"] = false

	// A cursor in n1's table, then n1 leaves: the walk goes on with n2 and n3.
	_, body := call(t, "GET", srv.URL+"/api/v1/clients?limit=1", nil)
	cursor := body["next"].(string)
	delete(fc.nodes, "n1")
	code, body := call(t, "GET", srv.URL+"/api/v1/clients?limit=1&cursor="+cursor, nil)
	if d, _ := body["data"].([]any); code != 200 || len(d) != 1 || d[0].(map[string]any)["node"] != "n3" {
		t.Errorf("the cursor's node gone: %d %v; want n3's first", code, body)
	}

	for _, q := range []string{"node=n9", "node=n3&cursor=" + cursor, "cursor=x", "cursor=bjE.!!"} {
		if code, body := call(t, "GET", srv.URL+"/api/v1/clients?"+q, nil); code/100 != 4 || body["error"] == nil {
			t.Errorf("%s: %d %v; want a JSON 4xx", q, code, body)
		}
	}
}

// TestListingNodeOnSingleNode: without a cluster a node filter is a bad request, and the
// items name no node.
func TestListingNodeOnSingleNode(t *testing.T) {
	srv, _, _ := newAPI(t, &auth.AdminAccess{})
	if code, body := call(t, "GET", srv.URL+"/api/v1/clients?node=n1", nil); code != 400 || body["error"] == nil {
		t.Errorf("node on a single node: %d %v; want a JSON 400", code, body)
	}
	_, body := call(t, "GET", srv.URL+"/api/v1/clients", nil)
	if _, ok := body["data"].([]any)[0].(map[string]any)["node"]; ok {
		t.Errorf("an item of a single node names a node: %v", body)
	}
}
