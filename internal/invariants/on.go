//go:build invariants

package invariants

// Enabled reports whether the build has the invariants tag: the expensive checks run.
const Enabled = true
