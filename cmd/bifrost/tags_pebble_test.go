//go:build !bifrost_nopebble

package main

// pebbleTags: the binary under test has the pebble engine, as this test binary.
const pebbleTags = ""
