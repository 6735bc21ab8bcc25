package listener

import (
	"bytes"
	"crypto/tls"
	"reflect"
	"unsafe"
)

// crypto/tls's input buffers, lent while a connection is read and taken back when it is
// idle.
//
// A tls.Conn reads into three buffers of its own and keeps them at the size of the
// largest thing it ever read: rawInput (the ciphertext of records: the ClientHello's, ~2
// KiB with a post-quantum key share; 17 to 38 KiB once a 16 KiB record came), input (a
// reader over the last record's plaintext, inside rawInput) and hand (handshake messages:
// the ClientHello, a client's certificate chain). Measured on Go 1.26, they were 3.5 KiB
// of the 7.1 KiB an idle TLS connection cost, and a connection that once received a large
// PUBLISH kept tens of KiB until it closed. crypto/tls has no way to let them go.
//
// So the pump lends rawInput the reader's input buffer (pumpBufs.input) for the time it
// reads, and takes it back when it stops; input and hand are emptied then too. An idle
// connection holds none of them, and a busy one allocates nothing for them. A partial
// record left at the end (its rest has not come yet) is copied into a buffer of its own
// size, which crypto/tls grows as it needs.
//
// This reaches into tls.Conn's unexported fields, found by name with reflection at start
// and checked for their types: a Go release that renames or retypes one turns the lending
// off (tlsFields.ok), and connections merely cost what crypto/tls makes them cost;
// TestTLSInputFields fails then, to say so. It is safe because only the goroutine that
// pumps a connection ever reads it (tls.go), and these buffers are touched only by reads:
// not by Write, ConnectionState or CloseWrite.
var tlsFields = findTLSFields()

// tlsFieldOffsets are the offsets of tls.Conn's input buffers; ok if all were found.
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

// tlsInputSize is the capacity of a lent input buffer: twice the largest record (TLS 1.2:
// 5 + 2^14 + 2048 bytes) and crypto/tls's read-ahead (512), so that bytes.Buffer always
// slides a partial record to the front rather than growing.
const tlsInputSize = 2 * (5 + 1<<14 + 2048 + 512)

// pumpBufs are the buffers one pump uses: one set per poller (epoll engine), and a pooled
// set (Server.tlsBufs) for each handshake goroutine and each read of the portable engine.
type pumpBufs struct {
	plain []byte // plaintext gathered for one OnData (Options.ReadBufferSize)
	input []byte // lent to crypto/tls as rawInput (tlsInputSize)
}

func newPumpBufs(plain int) *pumpBufs {
	return &pumpBufs{plain: make([]byte, plain), input: make([]byte, 0, tlsInputSize)}
}

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
	p := unsafe.Pointer(c)
	raw := (*bytes.Buffer)(unsafe.Add(p, tlsFields.rawInput))
	hand := (*bytes.Buffer)(unsafe.Add(p, tlsFields.hand))
	in := (*bytes.Reader)(unsafe.Add(p, tlsFields.input))
	return raw.Cap() == 0 && hand.Cap() == 0 && in.Size() == 0
}
