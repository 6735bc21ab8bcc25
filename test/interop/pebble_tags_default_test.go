//go:build !bifrost_nopebble

package interop_test

// pebbleTags: the process tests' broker has the pebble engine, as this test binary.
const pebbleTags = ""
