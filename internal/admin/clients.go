package admin

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/bifrost-mqtt/bifrost/internal/broker"
)

// The listings of clients and sessions. On a single node a page is a walk of the broker's
// table by session number (internal/broker/admin.go): no copy of the table, no pause of
// the pollers, and the cursor is the number to go on from. On a cluster the API of any
// node lists one node's sessions (node=name) or every node's: it walks the nodes in the
// order of their names and each node's table in its order, asking the others for a page
// over gRPC (internal/cluster/admin_sessions.go), so the cursor names a node and a number in
// its table. A page fills from as many nodes as it takes; the cost of a page is bounded
// by its limit and the broker's bound on the numbers one walk looks at, however many
// clients each node has. A node that does not answer is named in the page's unavailable
// list, and the walk goes on with the next; a node that left since the cursor was given
// is passed over. The cursor stays valid as nodes come and go: it is a place in the order,
// not an index.

// Cluster is what the API asks of the cluster of a clustered broker (clusterlink.Views).
type Cluster interface {
	// SessionNodes returns the names of the cluster's nodes, sorted.
	SessionNodes() []string
	// NodeSessions returns a page of node's sessions as Broker.Sessions does on that
	// node; an error when the node is down or did not answer.
	NodeSessions(ctx context.Context, node string, cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32, error)
}

// item is one session of a listing and, on a cluster, the node it is on.
type item struct {
	Node string `json:"node,omitempty"`
	broker.SessionInfo
}

// unavailable is a node a cluster-wide listing could not ask, and why.
type unavailable struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

// page is a listing's answer: next is the cursor of the following page, "" at the end.
type page struct {
	Data        []item        `json:"data"`
	Next        string        `json:"next,omitempty"`
	Unavailable []unavailable `json:"unavailable,omitempty"`
}

// position is where a cluster's listing goes on: node's table from session number id
// (0: its start).
type position struct {
	node string
	id   uint32
}

// String is the cursor: the node's name in URL-safe base64, a dot, the number in base 36.
func (p position) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(p.node)) + "." + strconv.FormatUint(uint64(p.id), 36)
}

// parsePosition reads a cursor String made.
func parsePosition(s string) (position, bool) {
	node, id, ok := strings.Cut(s, ".")
	name, err := base64.RawURLEncoding.DecodeString(node)
	if !ok || err != nil || len(name) == 0 {
		return position{}, false
	}
	n, err := strconv.ParseUint(id, 36, 32)
	return position{node: string(name), id: uint32(n)}, err == nil
}

func (a *api) list(w http.ResponseWriter, r *http.Request, online bool) {
	limit, ok := limitParam(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := broker.SessionFilter{Online: online, Prefix: q.Get("client_id_prefix"), Username: q.Get("username"),
		Listener: q.Get("listener")}
	if !online {
		switch s := q.Get("connected"); s {
		case "", "any":
		case "true":
			f.Online = true
		default:
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("connected: want true or any, got %q", s))
			return
		}
	}
	if a.o.Cluster != nil {
		a.clusterList(w, r, limit, f)
		return
	}
	if q.Has("node") {
		fail(w, http.StatusBadRequest, "bad_request", "node: this broker is not part of a cluster")
		return
	}
	var cursor uint64
	if s := q.Get("cursor"); s != "" {
		n, err := strconv.ParseUint(s, 36, 32)
		if err != nil || n == 0 {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("cursor: %q is not one this API gave", s))
			return
		}
		cursor = n
	}
	data, next := a.o.Broker.Sessions(uint32(cursor), limit, f)
	p := page{Data: make([]item, len(data))}
	for i, in := range data {
		p.Data[i].SessionInfo = in
	}
	if next != 0 {
		p.Next = strconv.FormatUint(uint64(next), 36)
	}
	writeJSON(w, http.StatusOK, p)
}

// clusterList answers a listing on a cluster: of the node the query names, or of all.
func (a *api) clusterList(w http.ResponseWriter, r *http.Request, limit int, f broker.SessionFilter) {
	q := r.URL.Query()
	nodes := a.o.Cluster.SessionNodes()
	one := q.Get("node")
	if one != "" {
		if !slices.Contains(nodes, one) {
			fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("node: no node %q in the cluster (GET /api/v1/nodes lists them)", one))
			return
		}
		nodes = []string{one}
	}
	if len(nodes) == 0 { // a cluster names this node at least; nothing to walk otherwise
		writeJSON(w, http.StatusOK, page{Data: []item{}})
		return
	}
	at := position{node: nodes[0]}
	if s := q.Get("cursor"); s != "" {
		p, ok := parsePosition(s)
		if !ok || one != "" && p.node != one {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("cursor: %q is not one this API gave for this listing", s))
			return
		}
		at = p
	}
	i, found := slices.BinarySearch(nodes, at.node)
	id := at.id
	if !found {
		id = 0 // the cursor's node left: the walk goes on at the next name
	}
	p := page{Data: []item{}}
	for ; i < len(nodes); i++ {
		data, next, err := a.o.Cluster.NodeSessions(r.Context(), nodes[i], id, limit-len(p.Data), f)
		id = 0
		if err != nil {
			if one != "" {
				fail(w, http.StatusServiceUnavailable, "node_unavailable", err.Error())
				return
			}
			p.Unavailable = append(p.Unavailable, unavailable{Node: nodes[i], Error: err.Error()})
			continue
		}
		for _, in := range data {
			p.Data = append(p.Data, item{Node: nodes[i], SessionInfo: in})
		}
		if next != 0 {
			p.Next = position{node: nodes[i], id: next}.String()
			break
		}
		if len(p.Data) == limit {
			if i+1 < len(nodes) {
				p.Next = position{node: nodes[i+1]}.String()
			}
			break
		}
	}
	writeJSON(w, http.StatusOK, p)
}
