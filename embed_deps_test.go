package bifrost_test

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestEmbeddingLinksNoCluster: a program that embeds package bifrost links no cluster
// code (memberlist, Raft, gRPC) unless it imports bifrost/cluster: docs/lab/edge.md measures
// what that saves a single node.
func TestEmbeddingLinksNoCluster(t *testing.T) {
	for _, pkg := range testenv.Deps(t, "", "github.com/bifrost-mqtt/bifrost") {
		if testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/cluster") || strings.HasPrefix(pkg, "github.com/hashicorp/") ||
			testenv.Under(pkg, "google.golang.org/grpc") || testenv.Under(pkg, "github.com/miekg/dns") {
			t.Errorf("package bifrost links %s", pkg)
		}
	}
}

// TestEmbeddingLinksNoEndpoint: a program that embeds package bifrost links none of the
// HTTP endpoint (the Prometheus client and what it brings, net/http and pprof, the admin
// API and dashboard) unless it imports bifrost/endpoint, nor the load tool: docs/lab/edge.md
// measures what that saves an embedder. Pebble links the Prometheus client itself, so the edge build's tag
// (bifrost_nopebble) is where none of it may be left; net/http goes with the endpoint.
func TestEmbeddingLinksNoEndpoint(t *testing.T) {
	for _, tags := range []string{"", "bifrost_nopebble"} {
		for _, pkg := range testenv.Deps(t, tags, "github.com/bifrost-mqtt/bifrost") {
			endpoint := pkg == "net/http/pprof" || testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/admin") ||
				testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/endpoint") ||
				testenv.Under(pkg, "github.com/prometheus/client_golang/prometheus/promhttp") ||
				testenv.Under(pkg, "github.com/prometheus/client_golang/prometheus/collectors") ||
				testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/loadgen") || testenv.Under(pkg, "github.com/coder/websocket")
			if tags == "bifrost_nopebble" {
				endpoint = endpoint || strings.HasPrefix(pkg, "github.com/prometheus/") || testenv.Under(pkg, "net/http")
			}
			if endpoint {
				t.Errorf("-tags %q: package bifrost links %s", tags, pkg)
			}
		}
	}
}
