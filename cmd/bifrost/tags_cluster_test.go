//go:build !bifrost_nocluster

package main

// The binary under test is the default build: it links the cluster.
const (
	brokerTags    = ""
	clusterLinked = true
)
