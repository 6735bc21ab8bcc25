package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The compact encoding of the Raft commands and snapshots: unsigned varints, and strings
// and byte strings prefixed with their length (internal/cluster's node metadata has the
// same layout, member_meta.go). A hand-written encoding rather than protobuf because a claim is
// written for every client CONNECT: it should cost a few dozen bytes and no reflection.

// errShort is a value cut off before its end.
var errShort = errors.New("cluster: truncated encoding")

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// A reader decodes what the append functions wrote. The first problem sticks: later reads
// return zero values, and err reports it, so a decoder checks once at its end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// end reports the first problem, or bytes left over after what the decoder expected.
func (r *reader) end() error {
	if r.err == nil && len(r.b) > 0 {
		return fmt.Errorf("cluster: %d bytes after the end of the encoding", len(r.b))
	}
	return r.err
}
