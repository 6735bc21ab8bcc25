//go:build !bifrost_nolend

package listener

// nolendTag: see tls_input_nolend_test.go.
const nolendTag = false
