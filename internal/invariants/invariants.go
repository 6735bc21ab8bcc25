// Package invariants holds the switch for the broker's expensive self-checks, as pebble's
// internal/invariants does: code guards a check with Enabled, a constant, so that a
// normal build compiles the check away and pays nothing. CI runs the broker's tests once
// built with them:
//
//	go test -tags invariants ./internal/session ./internal/broker ...
//
// With the tag, pooled messages (session/msgpool.go) check their reference counts and
// poison their bytes once released.
package invariants

// PoisonByte is what Poison fills released bytes with: a use after release reads it
// instead of the message it expected, and a test sees the corruption.
const PoisonByte = 0xdb

// Poison overwrites b with PoisonByte.
func Poison(b []byte) {
	for i := range b {
		b[i] = PoisonByte
	}
}
