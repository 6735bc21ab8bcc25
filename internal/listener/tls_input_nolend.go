//go:build !go1.26 || go1.27 || bifrost_nolend

package listener

import "crypto/tls"

// crypto/tls keeps its own input buffers: this Go release's crypto/tls has not been read
// for lending (tls_input_lend.go's build constraint), or the build tag bifrost_nolend
// turned it off (tls_input.go).

// tlsLending reports whether the pump lends crypto/tls its input buffer.
const tlsLending = false

// inputFieldsFound: no field is looked for.
func inputFieldsFound() bool { return false }

// lendInput lends nothing.
func lendInput(*tls.Conn, []byte) {}

// reclaimInput has nothing to take back.
func reclaimInput(*tls.Conn) bool { return true }

// inputIdle: crypto/tls's buffers are its own. For tests.
func inputIdle(*tls.Conn) bool { return false }
