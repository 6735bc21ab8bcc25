//go:build go1.26 && !go1.27 && !bifrost_nolend

package listener

import (
	"bytes"
	"crypto/tls"
	"reflect"
	"unsafe"
)

// Lending crypto/tls its input buffer (tls_input.go), on Go 1.26: built only for the
// releases whose crypto/tls was read for it (Go 1.26.8's conn.go), as nothing that a test
// of names and types can see would change if crypto/tls used these buffers differently.
//
// What it relies on, in crypto/tls (conn.go unless named):
//
//  1. tls.Conn has the direct fields rawInput (bytes.Buffer: ciphertext, starting at a
//     record header), input (bytes.Reader: the plaintext of the last application-data
//     record) and hand (bytes.Buffer: handshake messages). findTLSFields checks names and
//     types at start and lends nothing if one differs.
//  2. Only the reading side touches them, holding c.in's lock: Read, readRecordOrCCS,
//     readFromUntil, readHandshakeBytes, readHandshake, handlePostHandshakeMessage and
//     setReadTrafficSecret (hand.Len), the server handshake (handshake_server_tls13.go
//     doHelloRetryRequest: hand.Len). Write, CloseWrite, Close, ConnectionState and the
//     alerts do not. tls.go lets one goroutine at a time read a connection (the pump), so
//     nothing else uses a lent buffer while it is lent.
//  3. rawInput is filled only by readFromUntil: rawInput.Grow, then rawInput.ReadFrom from
//     the transport, into the buffer's own spare capacity. bytes.Buffer slides its bytes
//     to the front of that array, or moves them to a new array it allocates (then the
//     connection's own); it never writes elsewhere.
//  4. Records leave rawInput by rawInput.Next and are decrypted in place (halfConn.decrypt
//     opens payload[:0]). The plaintext of application data is kept only as input
//     (input.Reset(data), "owned by c.rawInput"); handshake plaintext is copied into hand
//     (hand.Write); alerts and change_cipher_spec are looked at and dropped. No other
//     field, and no pool, keeps a slice of rawInput's array: once input is empty, rawInput
//     is the only reference to the lent array, and reclaimInput replaces it.
//  5. Read reads a record only while input is empty (and the close_notify peek after a
//     read that emptied it), and returns what input held: after the pump's last Read
//     (tlsConn.readPlain, which reads until the wire would block), input is empty.
//  6. An error of the transport that is a net.Error with Temporary() (errWouldBlock) is
//     returned without becoming the connection's error (readRecordOrCCS, after each
//     readFromUntil), and a partial record stays in rawInput for the next Read
//     (TestTLSWouldBlockNotSticky).
//
// To lend on another release, read its crypto/tls for each point, extend the build
// constraint, and run the listener's tests on it: TestTLSStreamsKeptApart fails if the
// connections of one poller get each other's bytes. Patch releases (1.26.x), which bring
// security fixes, are run through the same tests by CI.

// tlsLending reports whether the pump lends crypto/tls its input buffer.
const tlsLending = true

// tlsFields are the offsets of tls.Conn's input buffers, found by name with reflection.
var tlsFields = findTLSFields()

// tlsFieldOffsets are the offsets of tls.Conn's input buffers; ok if all were found with
// the types this file expects.
type tlsFieldOffsets struct {
	rawInput, input, hand uintptr
	ok                    bool
}

func findTLSFields() tlsFieldOffsets {
	conn := reflect.TypeFor[tls.Conn]()
	field := func(name string, typ reflect.Type) (uintptr, bool) {
		f, ok := conn.FieldByName(name)
		return f.Offset, ok && f.Type == typ && len(f.Index) == 1
	}
	var o tlsFieldOffsets
	var raw, in, hand bool
	o.rawInput, raw = field("rawInput", reflect.TypeFor[bytes.Buffer]())
	o.input, in = field("input", reflect.TypeFor[bytes.Reader]())
	o.hand, hand = field("hand", reflect.TypeFor[bytes.Buffer]())
	o.ok = raw && in && hand
	return o
}

// inputFieldsFound reports whether findTLSFields found the three fields: lending is on.
func inputFieldsFound() bool { return tlsFields.ok }

// lendInput gives c the buffer in to read records into, unless it holds a partial record
// in a buffer of its own.
func lendInput(c *tls.Conn, in []byte) {
	if !tlsFields.ok {
		return
	}
	raw := (*bytes.Buffer)(unsafe.Add(unsafe.Pointer(c), tlsFields.rawInput))
	if raw.Len() == 0 {
		*raw = *bytes.NewBuffer(in[:0])
	}
}

// reclaimInput takes back what lendInput lent and empties c's input buffers: afterwards
// c refers to none of them. A partial record is kept in a copy of its own size. Called
// once c.Read said it would block or failed, when input is empty; if it is not (the pump
// stopped for a closing connection), nothing changes and it reports false: the lent
// buffer stays with c, and the caller needs a new one.
func reclaimInput(c *tls.Conn) bool {
	if !tlsFields.ok {
		return true // nothing was lent
	}
	p := unsafe.Pointer(c)
	raw := (*bytes.Buffer)(unsafe.Add(p, tlsFields.rawInput))
	in := (*bytes.Reader)(unsafe.Add(p, tlsFields.input))
	hand := (*bytes.Buffer)(unsafe.Add(p, tlsFields.hand))
	if in.Len() != 0 {
		return false
	}
	*in = bytes.Reader{}
	if hand.Len() == 0 {
		*hand = bytes.Buffer{}
	}
	if raw.Len() == 0 {
		*raw = bytes.Buffer{}
	} else {
		*raw = *bytes.NewBuffer(bytes.Clone(raw.Bytes()))
	}
	return true
}

// inputIdle reports whether c holds no input buffer: what reclaimInput leaves. For tests.
func inputIdle(c *tls.Conn) bool {
	if !tlsFields.ok {
		return false
	}
	p := unsafe.Pointer(c)
	raw := (*bytes.Buffer)(unsafe.Add(p, tlsFields.rawInput))
	hand := (*bytes.Buffer)(unsafe.Add(p, tlsFields.hand))
	in := (*bytes.Reader)(unsafe.Add(p, tlsFields.input))
	return raw.Cap() == 0 && hand.Cap() == 0 && in.Size() == 0
}
