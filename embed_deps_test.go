package bifrost_test

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestEmbeddingLinksNoCluster: a program that embeds package bifrost links no cluster
// code (memberlist, Raft, gRPC) unless it imports bifrost/cluster: docs/edge.md measures
// what that saves a single node.
func TestEmbeddingLinksNoCluster(t *testing.T) {
	for _, pkg := range testenv.Deps(t, "", "github.com/bifrost-mqtt/bifrost") {
		if testenv.Under(pkg, "github.com/bifrost-mqtt/bifrost/internal/cluster") || strings.HasPrefix(pkg, "github.com/hashicorp/") ||
			testenv.Under(pkg, "google.golang.org/grpc") || testenv.Under(pkg, "github.com/miekg/dns") {
			t.Errorf("package bifrost links %s", pkg)
		}
	}
}
