//go:build bifrost_nocluster

package interop_test

// clusterTags: a run with -tags bifrost_nocluster tests the edge build's broker.
const clusterTags = "bifrost_nocluster"
