package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// The admin API's listing of the whole cluster, asked of one node of three processes:
// every node's clients a page at a time, each once, each item naming its node; a node
// filter; a node killed in the middle of a walk named in the page that passes it.

// listPage is a page of GET /api/v1/clients.
type listPage struct {
	Data []struct {
		Node     string `json:"node"`
		ClientID string `json:"client_id"`
	} `json:"data"`
	Next        string `json:"next"`
	Unavailable []struct {
		Node  string `json:"node"`
		Error string `json:"error"`
	} `json:"unavailable"`
}

// list fetches one page of nd's listing with query and the cursor; the status code and
// the page.
func list(t *testing.T, nd *node, query, cursor string) (int, listPage) {
	t.Helper()
	if cursor != "" {
		query += "&cursor=" + url.QueryEscape(cursor)
	}
	// Longer than a peer's bound on one page (2 s), which a killed node may take.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + nd.httpAddr() + "/api/v1/clients?" + query)
	if err != nil {
		t.Fatalf("%s: %v", nd.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var p listPage
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%s: %v: %s", nd.name, err, body)
		}
	}
	return resp.StatusCode, p
}

// TestAdminClusterListing: clients spread over three nodes; the listing of all nodes on
// n1, two a page, has every one exactly once, with its node; node=n3 has n3's alone; a
// walk begun before n3 is killed goes on with the others and names n3 as unavailable,
// and node=n3 then answers 503.
func TestAdminClusterListing(t *testing.T) {
	c, _ := servingCluster(t, nil)
	const perNode = 5
	want := map[string]string{} // client id → node
	for _, nd := range c.nodes {
		for i := range perNode {
			id := fmt.Sprintf("lst-%s-%d", nd.name, i)
			mqtttest.Dial(t, nd.mqttAddr(), id)
			want[id] = nd.name
		}
	}
	n1, n3 := c.node("n1"), c.node("n3")
	const query = "limit=2&client_id_prefix=lst-"

	// walk pages on from cursor to the end; the items seen and the unavailable nodes.
	walk := func(cursor string, seen map[string][]string) (unavailable []string) {
		for range 100 {
			code, p := list(t, n1, query, cursor)
			if code != http.StatusOK {
				t.Fatalf("page at %q: %d", cursor, code)
			}
			for _, d := range p.Data {
				seen[d.ClientID] = append(seen[d.ClientID], d.Node)
			}
			for _, u := range p.Unavailable {
				unavailable = append(unavailable, u.Node)
				t.Logf("unavailable: %s: %s", u.Node, u.Error)
			}
			if p.Next == "" {
				return unavailable
			}
			cursor = p.Next
		}
		t.Fatal("no end of the listing after 100 pages")
		return nil
	}
	testenv.WaitFor(t, "every node's clients listed on n1, each once", func() bool {
		seen := map[string][]string{}
		if down := walk("", seen); len(down) != 0 || len(seen) != len(want) {
			return false
		}
		for id, nodes := range seen {
			if len(nodes) != 1 || nodes[0] != want[id] {
				t.Fatalf("%s listed as on %v; it is on %s", id, nodes, want[id])
			}
		}
		return true
	})

	code, p := list(t, n1, "limit=100&client_id_prefix=lst-&node=n3", "")
	if code != http.StatusOK || len(p.Data) != perNode {
		t.Errorf("node=n3: %d %+v; want n3's %d clients", code, p.Data, perNode)
	}
	for _, d := range p.Data {
		if d.Node != "n3" || want[d.ClientID] != "n3" {
			t.Errorf("node=n3 lists %s on %s", d.ClientID, d.Node)
		}
	}

	// A walk begun, then n3 killed.
	code, p = list(t, n1, query, "")
	if code != http.StatusOK || p.Next == "" || len(p.Data) != 2 {
		t.Fatalf("first page: %d %+v", code, p)
	}
	seen := map[string][]string{}
	for _, d := range p.Data {
		seen[d.ClientID] = append(seen[d.ClientID], d.Node)
	}
	n3.kill()
	down := walk(p.Next, seen)
	if !slices.Equal(down, []string{"n3"}) {
		t.Errorf("unavailable nodes named %v; want n3, once", down)
	}
	for id, node := range want {
		switch n := len(seen[id]); {
		case node == "n3" && n != 0:
			t.Errorf("%s of the killed n3 listed", id)
		case node != "n3" && n != 1:
			t.Errorf("%s listed %d times; want once", id, n)
		}
	}
	if code, _ := list(t, n1, query+"&node=n3", ""); code != http.StatusServiceUnavailable {
		t.Errorf("node=n3 once killed: %d; want 503", code)
	}
}
