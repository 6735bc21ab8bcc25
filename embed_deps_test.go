package bifrost_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestEmbeddingLinksNoCluster: a program that embeds package bifrost links no cluster
// code (memberlist, Raft, gRPC) unless it imports bifrost/cluster: docs/edge.md measures
// what that saves a single node. Asked of the go command: a test binary carries no
// package list.
func TestEmbeddingLinksNoCluster(t *testing.T) {
	gocmd := testenv.Command(t, "go", "the Go toolchain")
	out, err := exec.Command(gocmd, "list", "-deps", "github.com/bifrost-mqtt/bifrost").Output()
	testenv.Need(t, err == nil, fmt.Sprintf("a working go list of package bifrost's imports (%v)", err))
	for _, pkg := range strings.Fields(string(out)) {
		for _, p := range []string{"github.com/bifrost-mqtt/bifrost/internal/cluster/", "github.com/hashicorp/",
			"google.golang.org/grpc", "github.com/miekg/dns"} {
			if strings.HasPrefix(pkg+"/", p) {
				t.Errorf("package bifrost links %s", pkg)
			}
		}
	}
}
