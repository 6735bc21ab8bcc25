//go:build race

package testenv

// Race reports whether the tests run under the race detector. It makes sync.Pool drop
// items at random, so allocation counts and memory budgets mean nothing under it, and it
// slows TLS handshakes enough that tests opening thousands of them open fewer.
const Race = true
