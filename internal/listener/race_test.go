//go:build race

package listener

// raceEnabled reports whether the tests run under the race detector, which makes TLS
// handshakes slow enough for the tests that open thousands of them to open fewer.
const raceEnabled = true
