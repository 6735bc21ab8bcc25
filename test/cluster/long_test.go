package cluster

import "flag"

// The long fault set: CI runs each fault test once, briefly; bench/faults.sh runs them
// with these flags (go test ./test/cluster -args -long -rounds 20).
var (
	long   = flag.Bool("long", false, "run the fault tests that take minutes (partitions that outlast memberlist's GossipToTheDeadTime)")
	rounds = flag.Int("rounds", 1, "rounds of each repeatable fault test (cut, heal, check)")
)
