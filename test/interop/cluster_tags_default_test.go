//go:build !bifrost_nocluster

package interop_test

// clusterTags: the process tests' broker links the cluster, as this test binary's build.
const clusterTags = ""
