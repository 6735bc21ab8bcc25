package main

// The operator's HTTP endpoint (/metrics, /healthz, /load, pprof, the admin API and
// dashboard): every build of the broker serves it; package bifrost alone links none of
// it (docs/edge.md, "Embedding").
import _ "github.com/bifrost-mqtt/bifrost/endpoint"
