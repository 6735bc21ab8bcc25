//go:build !bifrost_nocluster

package main

// Configs with a cluster block run. The edge build (-tags bifrost_nocluster) leaves the
// cluster out: 12 MB of binary and about 2.5 MiB of resident memory (docs/lab/edge.md).
import _ "github.com/bifrost-mqtt/bifrost/cluster"
