//go:build bifrost_nolend

package listener

// nolendTag reports whether the build tag bifrost_nolend turned lending off
// (tls_input.go).
const nolendTag = true
