//go:build !bifrost_nolend

package listener

// nolendTag: see nolend_test.go.
const nolendTag = false
