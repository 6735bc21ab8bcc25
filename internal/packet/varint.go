package packet

var errVarint = malformed("MQTT-1.5.5-1", "variable byte integer longer than 4 bytes")

// uvarint decodes a variable byte integer (spec 1.5.5) from the start of b. It returns
// n == 0 and a nil error when b ends before the integer does, and an error when the
// integer would take more than four bytes [MQTT-1.5.5-1].
func uvarint(b []byte) (v uint32, n int, err error) {
	var shift uint
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0, nil
		}
		c := b[i]
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			// Spec 1.5.5 wants the minimum number of bytes; a non-minimal encoding
			// (a trailing 0x00 continuation such as 0x80 0x00) is accepted, as every
			// broker does, since its value is unambiguous.
			return v, i + 1, nil
		}
		shift += 7
	}
	return 0, 0, errVarint
}

// appendUvarint appends v as a variable byte integer; v must be at most MaxRemainingLength.
func appendUvarint(dst []byte, v uint32) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// uvarintLen is the number of bytes appendUvarint writes for v.
func uvarintLen(v uint32) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<21:
		return 3
	}
	return 4
}
