package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoLoadTool: the broker binary ships only what it serves, so it links neither the
// load generator nor the WebSocket client library it uses; both belong to cmd/bifrost-bench.
// Asked of the go command: a test binary carries no package list.
func TestNoLoadTool(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	out, err := exec.Command(gocmd, "list", "-deps", "github.com/bifrost-mqtt/bifrost/cmd/bifrost").Output()
	if err != nil {
		if os.Getenv("BIFROST_CI") == "1" {
			t.Fatalf("go list: %v", err)
		}
		t.Skipf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/bifrost-mqtt/bifrost/internal/loadgen" ||
			pkg == "github.com/coder/websocket" || strings.HasPrefix(pkg, "github.com/coder/websocket/") {
			t.Errorf("the broker links %s", pkg)
		}
	}
}
