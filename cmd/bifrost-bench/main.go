// Command bifrost-bench measures an MQTT broker running on this machine (bifrost or any
// other): idle connections, fan-in, fan-out, pairs and churn (see docs/benchmarks.md).
//
//	bifrost-bench MODE [flags]     bifrost-bench -h lists the modes and flags
//
// It is a command of its own so that the broker binary links neither the load generator
// nor its WebSocket client. Worker processes of a large conns run are this binary again.
package main

import (
	"os"

	"github.com/bifrost-mqtt/bifrost/internal/loadgen"
)

func main() {
	// No arguments lead back to loadgen.Main: workers run `bifrost-bench conns -worker ...`.
	os.Exit(loadgen.Main(os.Args[1:], os.Stdout, os.Stderr, nil))
}
