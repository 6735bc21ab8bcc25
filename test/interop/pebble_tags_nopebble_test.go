//go:build bifrost_nopebble

package interop_test

// pebbleTags: a run with -tags bifrost_nopebble tests a broker with the log engine only.
const pebbleTags = "bifrost_nopebble"
