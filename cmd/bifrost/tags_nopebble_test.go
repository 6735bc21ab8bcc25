//go:build bifrost_nopebble

package main

// pebbleTags: a run with -tags bifrost_nopebble tests a binary with the log engine only.
const pebbleTags = "bifrost_nopebble"
