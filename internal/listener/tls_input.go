package listener

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
// This reaches into tls.Conn's unexported fields and relies on how crypto/tls uses them,
// which a Go release may change without renaming anything; a change that kept a slice of
// a lent buffer past a Read would hand one client's bytes to another. So lending is built
// only for the Go releases whose crypto/tls was read for it (tls_input_lend.go says what
// it relies on); on any other, or with the build tag bifrost_nolend (CI runs the TLS
// tests so once), crypto/tls keeps its own buffers (tls_input_nolend.go): correct, and 3.5
// KiB more per idle connection. TestTLSInputLent fails on a release without lending, to
// say that its crypto/tls is to be read.
//
// Upstream, crypto/tls letting go of these buffers itself would make this unnecessary:
// golang/go#43563 ("rawInput buffer has no chance to shrink on large number of idle
// conns", open since 2021) and #81348 ("reduce idle memory usage", open; its CL "don't
// pin record-sized buffers while blocked in Read" does it for a Read that blocks, not yet
// for one that returns a temporary error, as the pump's do).

// tlsInputSize is the capacity of a lent input buffer: twice the largest record (TLS 1.2:
// 5 + 2^14 + 2048 bytes) and crypto/tls's read-ahead (512), so that bytes.Buffer always
// slides a partial record to the front rather than growing.
const tlsInputSize = 2 * (5 + 1<<14 + 2048 + 512)

// pumpBufs are the buffers one pump uses: one set per poller (epoll engine), and a pooled
// set (Server.tlsBufs) for each handshake goroutine and each read of the portable engine.
type pumpBufs struct {
	plain []byte // plaintext gathered for one OnData (Options.ReadBufferSize)
	input []byte // lent to crypto/tls as rawInput (tlsInputSize); nil without lending
	loop  int    // the poller whose buffers these are, or -1 (see conn.onData)
}

func newPumpBufs(plain int) *pumpBufs {
	b := &pumpBufs{plain: make([]byte, plain), loop: -1}
	if tlsLending {
		b.input = make([]byte, 0, tlsInputSize)
	}
	return b
}
