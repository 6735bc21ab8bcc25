package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestNoPebble: the edge build with the log engine only (-tags 'bifrost_nocluster
// bifrost_nopebble') links no cockroachdb module: neither Pebble nor what comes with it
// (cockroachdb/errors, its sentry-go and gogo/protobuf). The cluster's Raft log keeps
// Pebble, so bifrost_nopebble alone leaves it in a build with the cluster. Asked of the
// go command: a test binary carries no package list.
func TestNoPebble(t *testing.T) {
	gocmd := testenv.Command(t, "go", "the Go toolchain")
	out, err := exec.Command(gocmd, "list", "-deps", "-tags", "bifrost_nocluster bifrost_nopebble",
		"github.com/bifrost-mqtt/bifrost/cmd/bifrost").Output()
	testenv.Need(t, err == nil, fmt.Sprintf("a working go list of the broker's packages (%v)", err))
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/cockroachdb/") || strings.HasPrefix(pkg, "github.com/getsentry/") ||
			strings.HasPrefix(pkg, "github.com/gogo/protobuf") || pkg == "github.com/bifrost-mqtt/bifrost/internal/pebbledb" {
			t.Errorf("the broker built with -tags 'bifrost_nocluster bifrost_nopebble' links %s", pkg)
		}
	}
}
