package admin

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Broker is what the API reads and changes of the broker (internal/broker/admin.go).
type Broker interface {
	Sessions(cursor uint32, limit int, f broker.SessionFilter) ([]broker.SessionInfo, uint32)
	Session(cid string) (broker.SessionInfo, bool)
	Kick(cid string, rc packet.ReasonCode) bool
	// Publish publishes as the broker itself (the embedding API's Publish).
	Publish(topic string, payload []byte, qos uint8, retain bool) error
	Retained(filter string, offset, limit int) ([]broker.RetainedInfo, bool)
	RetainedMessage(topic string) (broker.RetainedInfo, bool)
	Subscribers(topic string, limit int) []broker.SubscriberInfo
}

// A Listener is one MQTT listener as the API shows it.
type Listener struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Address     string `json:"address"`
	Connections int    `json:"connections"`
}

// Options configure the API.
type Options struct {
	Broker Broker
	Access *auth.AdminAccess
	// Hosts are the names a call may give in its Host when Access asks for no
	// credentials (http.allowed_hosts, besides IP addresses and localhost).
	Hosts     Hosts
	Log       *slog.Logger
	Listeners func() []Listener
	// Reload re-reads what a reload re-reads (SIGHUP): the config file when the program
	// has one, and the password, ACL, certificate and token files, and puts the admin
	// users and tokens in force (Access.Set). Its report (what changed, what needs a
	// restart) is the response's "report".
	Reload func() (report any, err error)
	// Config is the configuration in force, secrets masked.
	Config func() any
	// Nodes are the cluster's nodes; nil on a single node.
	Nodes func() []metrics.NodeLoad
	// Owner is the node a client id is on as the cluster's log says, and this node's
	// name; nil on a single node.
	Owner func(cid string) (node, self string)
	// Cluster lists the other nodes' sessions (clients.go); nil on a single node.
	Cluster Cluster
	// Metrics and Source feed the dashboard's stream (dashboard.go).
	Metrics *metrics.Registry
	Source  Source
}

// Mux is where the routes go: the HTTP endpoint's mux.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

//go:embed openapi.json
var openAPI []byte

// routes are the API's routes, method and path as net/http's patterns write them;
// TestOpenAPIMatchesRoutes checks openapi.json against this list.
var routes = []string{
	"GET /api/v1/clients",
	"GET /api/v1/clients/{id}",
	"DELETE /api/v1/clients/{id}",
	"GET /api/v1/sessions",
	"GET /api/v1/sessions/{id}",
	"GET /api/v1/listeners",
	"POST /api/v1/reload",
	"POST /api/v1/publish",
	"GET /api/v1/retained",
	"GET /api/v1/retained/{topic...}",
	"DELETE /api/v1/retained/{topic...}",
	"GET /api/v1/subscribers",
	"GET /api/v1/nodes",
	"GET /api/v1/clients/{id}/node",
	"GET /api/v1/config",
	"GET /api/v1/stream",
	"GET /api/v1/openapi.json",
}

// Register adds the API's routes to mux.
func Register(mux Mux, o Options) {
	a := &api{o: o}
	handlers := map[string]func(w http.ResponseWriter, r *http.Request, who string){
		"GET /api/v1/clients":                func(w http.ResponseWriter, r *http.Request, _ string) { a.list(w, r, true) },
		"GET /api/v1/clients/{id}":           func(w http.ResponseWriter, r *http.Request, _ string) { a.detail(w, r, true) },
		"DELETE /api/v1/clients/{id}":        a.kick,
		"GET /api/v1/sessions":               func(w http.ResponseWriter, r *http.Request, _ string) { a.list(w, r, false) },
		"GET /api/v1/sessions/{id}":          func(w http.ResponseWriter, r *http.Request, _ string) { a.detail(w, r, false) },
		"GET /api/v1/listeners":              a.listeners,
		"POST /api/v1/reload":                a.reload,
		"POST /api/v1/publish":               a.publish,
		"GET /api/v1/retained":               a.retainedList,
		"GET /api/v1/retained/{topic...}":    a.retainedGet,
		"DELETE /api/v1/retained/{topic...}": a.retainedDelete,
		"GET /api/v1/subscribers":            a.subscribers,
		"GET /api/v1/nodes":                  a.nodes,
		"GET /api/v1/clients/{id}/node":      a.owner,
		"GET /api/v1/config":                 a.config,
		"GET /api/v1/stream":                 a.stream,
		"GET /api/v1/openapi.json": func(w http.ResponseWriter, _ *http.Request, _ string) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(openAPI)
		},
	}
	for _, p := range routes {
		h := handlers[p]
		if h == nil {
			panic("admin: no handler for " + p)
		}
		mux.Handle(p, a.guard(h))
	}
	a.registerDashboard(mux)
	// Anything else under the prefix gets a JSON 404, not the mux's text one.
	mux.Handle("/api/v1/", a.guard(func(w http.ResponseWriter, r *http.Request, _ string) {
		fail(w, http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path)
	}))
}

type api struct{ o Options }

// guard authenticates every call; a refused one learns why and changes nothing. A call
// without credentials, where none are asked for, must name the endpoint in its Host
// (Hosts): whether they are asked for changes with a reload, so the rule is applied
// here, call by call.
func (a *api) guard(h func(w http.ResponseWriter, r *http.Request, who string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); r.Method != http.MethodGet && o != "" && !sameOrigin(o, r.Host) {
			// A page of another site in the operator's browser posting to the API: with
			// no credentials asked for, or with a browser that has them cached (Basic).
			fail(w, http.StatusForbidden, "forbidden", "a change from another origin ("+o+") is refused")
			return
		}
		who, err := Who(a.o.Access, r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="bifrost admin", charset="UTF-8"`)
			fail(w, http.StatusUnauthorized, "unauthorized", err.Error())
			return
		}
		if who == auth.Anonymous && !a.o.Hosts.Allow(r.Host) {
			fail(w, http.StatusMisdirectedRequest, "misdirected", HostRefused(r.Host))
			return
		}
		h(w, r, who)
	})
}

// sameOrigin reports whether origin (scheme://host[:port]) names host.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host == host
}

// The bounds of a page.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

func (a *api) detail(w http.ResponseWriter, r *http.Request, online bool) {
	cid := r.PathValue("id")
	in, ok := a.o.Broker.Session(cid)
	if !ok || online && !in.Online {
		what := "session"
		if online {
			what = "connected client"
		}
		fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no %s with client id %q", what, cid))
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// kickReasons are the DISCONNECT reason codes a server may send [MQTT-3.14.2.1] that
// make sense for an operator's disconnect.
var kickReasons = map[packet.ReasonCode]bool{
	packet.Success: true, packet.UnspecifiedError: true, packet.NotAuthorized: true,
	packet.ServerBusy: true, packet.ServerShuttingDown: true, packet.KeepAliveTimeout: true,
	packet.QuotaExceeded: true, packet.AdministrativeAction: true, packet.UseAnotherServer: true,
	packet.ServerMoved: true, packet.ConnectionRateExceeded: true,
}

func (a *api) kick(w http.ResponseWriter, r *http.Request, who string) {
	cid := r.PathValue("id")
	rc := packet.AdministrativeAction
	if s := r.URL.Query().Get("reason"); s != "" {
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 8)
		if err != nil || !kickReasons[packet.ReasonCode(n)] {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("reason: %q is not a DISCONNECT reason code a server sends for this (0x98, 0x89, 0x8b, 0x9c, ...)", s))
			return
		}
		rc = packet.ReasonCode(n)
	}
	if !a.o.Broker.Kick(cid, rc) {
		fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no connected client with client id %q", cid))
		return
	}
	a.o.Log.Info("admin: client disconnected", "by", who, "client", cid, "reason", fmt.Sprintf("%#02x", byte(rc)))
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) listeners(w http.ResponseWriter, _ *http.Request, _ string) {
	ls := []Listener{}
	if a.o.Listeners != nil {
		ls = append(ls, a.o.Listeners()...)
	}
	writeJSON(w, http.StatusOK, struct {
		Data []Listener `json:"data"`
	}{ls})
}

func (a *api) reload(w http.ResponseWriter, _ *http.Request, who string) {
	if a.o.Reload == nil {
		fail(w, http.StatusNotImplemented, "not_implemented", "this broker has nothing to reload")
		return
	}
	report, err := a.o.Reload()
	if err != nil {
		a.o.Log.Warn("admin: reload failed; what did not load kept its previous state", "by", who, "err", err)
		fail(w, http.StatusUnprocessableEntity, "reload_failed", err.Error())
		return
	}
	a.o.Log.Info("admin: reloaded", "by", who)
	writeJSON(w, http.StatusOK, struct {
		Reloaded bool `json:"reloaded"`
		Report   any  `json:"report,omitempty"`
	}{true, report})
}

// publishRequest is the body of POST /api/v1/publish: the payload as text, or as base64
// for bytes that are not.
type publishRequest struct {
	Topic         string `json:"topic"`
	Payload       string `json:"payload"`
	PayloadBase64 string `json:"payload_base64"`
	QoS           uint8  `json:"qos"`
	Retain        bool   `json:"retain"`
}

// maxPublishBody bounds a publish request's body.
const maxPublishBody = 1 << 20

func (a *api) publish(w http.ResponseWriter, r *http.Request, who string) {
	var req publishRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPublishBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad_request", "body: want a JSON object {topic, payload or payload_base64, qos, retain}: "+err.Error())
		return
	}
	payload := []byte(req.Payload)
	if req.PayloadBase64 != "" {
		if req.Payload != "" {
			fail(w, http.StatusBadRequest, "bad_request", "payload and payload_base64: give one")
			return
		}
		b, err := base64.StdEncoding.DecodeString(req.PayloadBase64)
		if err != nil {
			fail(w, http.StatusBadRequest, "bad_request", "payload_base64: "+err.Error())
			return
		}
		payload = b
	}
	switch {
	case req.Topic == "" || strings.ContainsAny(req.Topic, "+#\x00") || !utf8.ValidString(req.Topic):
		fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("topic: %q is not a topic name (not empty, UTF-8, no wildcards)", req.Topic))
		return
	case req.QoS > 2:
		fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("qos: want 0, 1 or 2, got %d", req.QoS))
		return
	}
	if err := a.o.Broker.Publish(req.Topic, payload, req.QoS, req.Retain); err != nil {
		fail(w, http.StatusUnprocessableEntity, "publish_failed", err.Error())
		return
	}
	a.o.Log.Info("admin: published", "by", who, "topic", req.Topic, "bytes", len(payload), "qos", req.QoS, "retain", req.Retain)
	writeJSON(w, http.StatusOK, struct {
		Published bool `json:"published"`
	}{true})
}

func (a *api) config(w http.ResponseWriter, _ *http.Request, _ string) {
	if a.o.Config == nil {
		fail(w, http.StatusNotImplemented, "not_implemented", "no configuration to show")
		return
	}
	writeJSON(w, http.StatusOK, a.o.Config())
}

// limitParam reads the limit query parameter (defaultLimit when absent).
func limitParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultLimit, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit: want 1 to %d, got %q", maxLimit, s))
		return 0, false
	}
	return n, true
}

func (a *api) retainedList(w http.ResponseWriter, r *http.Request, _ string) {
	limit, ok := limitParam(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	filter := q.Get("filter")
	if filter == "" {
		filter = "#"
	}
	if err := packet.ValidTopicFilter([]byte(filter)); err != nil || strings.HasPrefix(filter, "$share/") {
		fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("filter: %q is not a topic filter", filter))
		return
	}
	offset := 0
	if s := q.Get("cursor"); s != "" {
		n, err := strconv.ParseUint(s, 36, 31)
		if err != nil {
			fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("cursor: %q is not one this API gave", s))
			return
		}
		offset = int(n)
	}
	data, more := a.o.Broker.Retained(filter, offset, limit)
	out := struct {
		Data []broker.RetainedInfo `json:"data"`
		Next string                `json:"next,omitempty"`
	}{Data: data}
	if out.Data == nil {
		out.Data = []broker.RetainedInfo{}
	}
	if more {
		out.Next = strconv.FormatUint(uint64(offset+len(data)), 36)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) retainedGet(w http.ResponseWriter, r *http.Request, _ string) {
	topic := r.PathValue("topic")
	in, ok := a.o.Broker.RetainedMessage(topic)
	if !ok {
		fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no retained message on %q", topic))
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// retainedDelete clears a retained message as a client would: an empty retained publish,
// which the store and the other nodes of a cluster follow, and which subscribers of the
// topic receive as an empty message [MQTT-3.3.1-10].
func (a *api) retainedDelete(w http.ResponseWriter, r *http.Request, who string) {
	topic := r.PathValue("topic")
	if _, ok := a.o.Broker.RetainedMessage(topic); !ok {
		fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no retained message on %q", topic))
		return
	}
	if err := a.o.Broker.Publish(topic, nil, 0, true); err != nil {
		fail(w, http.StatusUnprocessableEntity, "delete_failed", err.Error())
		return
	}
	a.o.Log.Info("admin: retained message deleted", "by", who, "topic", topic)
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) subscribers(w http.ResponseWriter, r *http.Request, _ string) {
	limit, ok := limitParam(w, r)
	if !ok {
		return
	}
	topic := r.URL.Query().Get("topic")
	if err := packet.ValidTopicName([]byte(topic)); err != nil || topic == "" {
		fail(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("topic: %q is not a topic name", topic))
		return
	}
	data := a.o.Broker.Subscribers(topic, limit)
	if data == nil {
		data = []broker.SubscriberInfo{}
	}
	writeJSON(w, http.StatusOK, struct {
		Data []broker.SubscriberInfo `json:"data"`
	}{data})
}

func (a *api) nodes(w http.ResponseWriter, _ *http.Request, _ string) {
	ns := []metrics.NodeLoad{}
	if a.o.Nodes != nil {
		ns = append(ns, a.o.Nodes()...)
	}
	writeJSON(w, http.StatusOK, struct {
		Clustered bool               `json:"clustered"`
		Data      []metrics.NodeLoad `json:"data"`
	}{a.o.Nodes != nil, ns})
}

// owner answers which node a client id is on: the cluster's owner of it, or this node
// on a single node when the session is here.
func (a *api) owner(w http.ResponseWriter, r *http.Request, _ string) {
	cid := r.PathValue("id")
	node, self := "", ""
	if a.o.Owner != nil {
		node, self = a.o.Owner(cid)
	} else if _, ok := a.o.Broker.Session(cid); ok {
		node = "local"
		self = node
	}
	if node == "" {
		fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no node has a session of client id %q", cid))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		ClientID string `json:"client_id"`
		Node     string `json:"node"`
		ThisNode bool   `json:"this_node"`
	}{cid, node, node == self})
}
