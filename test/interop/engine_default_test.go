//go:build !bifrost_portable

package interop_test

// brokerTags are the build tags of the bifrost binary the process tests run: those of
// this test binary, so that a run with -tags bifrost_portable tests the portable engine.
const brokerTags = ""
