// Package endpoint serves a bifrost broker's operator HTTP endpoint (http.address):
// /metrics in Prometheus's format, /healthz, /load, /debug/pprof/, the admin API and
// dashboard, and a cluster node's /cluster. A program that imports it can start a config
// whose http.address is not "off"; one that does not links none of that code (the
// Prometheus client, net/http, pprof, the admin API), and its config must say
// http.address: off. cmd/bifrost imports it; an embedder that wants the endpoint adds
//
//	import _ "github.com/bifrost-mqtt/bifrost/endpoint"
//
// The endpoint serves its own mux, but importing it imports net/http/pprof, whose init
// registers the profiles on http.DefaultServeMux: a program that serves DefaultServeMux
// to the world exposes them.
package endpoint

import (
	engine "github.com/bifrost-mqtt/bifrost/internal/endpoint"
	"github.com/bifrost-mqtt/bifrost/internal/httplink"
)

func init() { httplink.Register(engine.Open) }
