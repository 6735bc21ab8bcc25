package main

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestNoLoadTool: the broker binary ships only what it serves, so it links neither the
// load generator nor the WebSocket client library it uses; both belong to cmd/bifrost-bench.
func TestNoLoadTool(t *testing.T) {
	for _, pkg := range testenv.Deps(t, "", "github.com/bifrost-mqtt/bifrost/cmd/bifrost") {
		if testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/loadgen") || testenv.Under(pkg, "github.com/coder/websocket") {
			t.Errorf("the broker links %s", pkg)
		}
	}
}

// TestLinksCluster: the broker binary runs configs with a cluster block, so it links the
// cluster; the edge build (-tags bifrost_nocluster) does not, and neither does package
// bifrost alone (TestEmbeddingLinksNoCluster in the root).
func TestLinksCluster(t *testing.T) {
	for _, tc := range []struct {
		tags string
		want bool
	}{{"", true}, {"bifrost_nocluster", false}} {
		got := false
		for _, pkg := range testenv.Deps(t, tc.tags, "github.com/bifrost-mqtt/bifrost/cmd/bifrost") {
			got = got || testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/cluster") ||
				strings.HasPrefix(pkg, "github.com/hashicorp/") || testenv.Under(pkg, "google.golang.org/grpc")
		}
		if got != tc.want {
			t.Errorf("-tags %q: the broker links the cluster: %v, want %v", tc.tags, got, tc.want)
		}
	}
}

// TestLinksEndpoint: every build of the broker serves the HTTP endpoint, the edge build
// too, so it links the endpoint, the admin API and the Prometheus client (which package
// bifrost alone does not: TestEmbeddingLinksNoEndpoint in the root).
func TestLinksEndpoint(t *testing.T) {
	for _, tags := range []string{"", "bifrost_nocluster bifrost_nopebble"} {
		linked := map[string]bool{}
		for _, pkg := range testenv.Deps(t, tags, "github.com/bifrost-mqtt/bifrost/cmd/bifrost") {
			linked[pkg] = true
		}
		for _, pkg := range []string{"github.com/bifrost-mqtt/bifrost/internal/endpoint", "github.com/bifrost-mqtt/bifrost/internal/admin",
			"github.com/prometheus/client_golang/prometheus/promhttp", "net/http/pprof"} {
			if !linked[pkg] {
				t.Errorf("-tags %q: the broker does not link %s", tags, pkg)
			}
		}
	}
}
