//go:build !invariants

package invariants

// Enabled: see on.go.
const Enabled = false
