//go:build bifrost_nocluster

package main

// The binary under test is the edge build (go test -tags bifrost_nocluster): no cluster.
const (
	brokerTags    = "bifrost_nocluster"
	clusterLinked = false
)
