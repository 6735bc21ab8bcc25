package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestNoLoadTool: the broker binary ships only what it serves, so it links neither the
// load generator nor the WebSocket client library it uses; both belong to cmd/bifrost-bench.
// Asked of the go command: a test binary carries no package list.
func TestNoLoadTool(t *testing.T) {
	gocmd := testenv.Command(t, "go", "the Go toolchain")
	out, err := exec.Command(gocmd, "list", "-deps", "github.com/bifrost-mqtt/bifrost/cmd/bifrost").Output()
	testenv.Need(t, err == nil, fmt.Sprintf("a working go list of the broker's packages (%v)", err))
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/bifrost-mqtt/bifrost/internal/loadgen" ||
			pkg == "github.com/coder/websocket" || strings.HasPrefix(pkg, "github.com/coder/websocket/") {
			t.Errorf("the broker links %s", pkg)
		}
	}
}

// TestLinksCluster: the broker binary runs configs with a cluster block, so it links the
// cluster; the edge build (-tags bifrost_nocluster) does not, and neither does package
// bifrost alone (TestEmbeddingLinksNoCluster in the root).
func TestLinksCluster(t *testing.T) {
	gocmd := testenv.Command(t, "go", "the Go toolchain")
	for _, tc := range []struct {
		tags string
		want bool
	}{{"", true}, {"bifrost_nocluster", false}} {
		out, err := exec.Command(gocmd, "list", "-tags", tc.tags, "-deps", "github.com/bifrost-mqtt/bifrost/cmd/bifrost").Output()
		testenv.Need(t, err == nil, fmt.Sprintf("a working go list of the broker's packages (%v)", err))
		got := false
		for _, pkg := range strings.Fields(string(out)) {
			got = got || pkg == "github.com/bifrost-mqtt/bifrost/internal/cluster" ||
				strings.HasPrefix(pkg, "github.com/hashicorp/") || strings.HasPrefix(pkg, "google.golang.org/grpc")
		}
		if got != tc.want {
			t.Errorf("-tags %q: the broker links the cluster: %v, want %v", tc.tags, got, tc.want)
		}
	}
}
