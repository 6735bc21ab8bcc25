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
