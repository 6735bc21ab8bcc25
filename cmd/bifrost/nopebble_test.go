package main

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestNoPebble: the edge build with the log engine only (-tags 'bifrost_nocluster
// bifrost_nopebble') links no cockroachdb module: neither Pebble nor what comes with it
// (cockroachdb/errors, its sentry-go and gogo/protobuf). The cluster's Raft log keeps
// Pebble, so bifrost_nopebble alone leaves it in a build with the cluster.
func TestNoPebble(t *testing.T) {
	for _, pkg := range testenv.Deps(t, "bifrost_nocluster bifrost_nopebble", "github.com/bifrost-mqtt/bifrost/cmd/bifrost") {
		if strings.HasPrefix(pkg, "github.com/cockroachdb/") || strings.HasPrefix(pkg, "github.com/getsentry/") ||
			testenv.Under(pkg, "github.com/gogo/protobuf") || pkg == "github.com/bifrost-mqtt/bifrost/internal/pebbledb" {
			t.Errorf("the broker built with -tags 'bifrost_nocluster bifrost_nopebble' links %s", pkg)
		}
	}
}
