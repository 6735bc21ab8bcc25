package packet

import "encoding/binary"

var (
	errShort    = malformed("MQTT-1.5", "packet ends inside a field")
	errTrailing = malformed("", "bytes after the last field of the packet")
)

// cursor reads the fields of one packet body. Every read checks bounds; fields are slices
// of the body, never copies.
type cursor struct {
	b []byte
	i int
}

func (c *cursor) left() int { return len(c.b) - c.i }

func (c *cursor) u8() (byte, error) {
	if c.i >= len(c.b) {
		return 0, errShort
	}
	c.i++
	return c.b[c.i-1], nil
}

func (c *cursor) u16() (uint16, error) {
	if c.left() < 2 {
		return 0, errShort
	}
	c.i += 2
	return binary.BigEndian.Uint16(c.b[c.i-2:]), nil
}

func (c *cursor) u32() (uint32, error) {
	if c.left() < 4 {
		return 0, errShort
	}
	c.i += 4
	return binary.BigEndian.Uint32(c.b[c.i-4:]), nil
}

func (c *cursor) varint() (uint32, error) {
	v, n, err := uvarint(c.b[c.i:])
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, errShort
	}
	c.i += n
	return v, nil
}

// bin reads Binary Data: a two-byte length and that many bytes (spec 1.5.6).
func (c *cursor) bin() ([]byte, error) {
	n, err := c.u16()
	if err != nil {
		return nil, err
	}
	if c.left() < int(n) {
		return nil, errShort
	}
	c.i += int(n)
	return c.b[c.i-int(n) : c.i : c.i], nil
}

// str reads a UTF-8 Encoded String (spec 1.5.4) and validates it.
func (c *cursor) str() ([]byte, error) {
	s, err := c.bin()
	if err != nil {
		return nil, err
	}
	if !ValidUTF8(s) {
		return nil, errUTF8
	}
	return s, nil
}

// rest returns the unread bytes and consumes them.
func (c *cursor) rest() []byte {
	r := c.b[c.i:len(c.b):len(c.b)]
	c.i = len(c.b)
	return r
}

// end reports an error if bytes remain.
func (c *cursor) end() error {
	if c.i != len(c.b) {
		return errTrailing
	}
	return nil
}

func appendU16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendU32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// appendBin appends Binary Data or a UTF-8 string: a two-byte length and the bytes. The
// caller keeps len(b) <= 65,535; longer input is cut there rather than corrupting the
// stream, and Validate methods report it beforehand.
func appendBin(dst, b []byte) []byte {
	if len(b) > 0xffff {
		b = b[:0xffff]
	}
	return append(appendU16(dst, uint16(len(b))), b...)
}

func appendStr(dst []byte, s string) []byte {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	return append(appendU16(dst, uint16(len(s))), s...)
}
