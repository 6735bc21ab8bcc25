package main

import (
	"io"

	"github.com/bifrost-mqtt/bifrost/internal/loadgen"
)

// bench runs the load generator against a broker on this machine (see docs/benchmarks.md).
// Worker processes of a large conns run are this binary again, started as `bifrost bench`.
func bench(args []string, stdout, stderr io.Writer) int {
	return loadgen.Main(args, stdout, stderr, []string{"bench"})
}
