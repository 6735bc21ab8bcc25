package packet

// Header is a decoded fixed header.
type Header struct {
	Type      Type
	Flags     byte // the low nibble of the first byte
	Remaining int  // the remaining length: bytes of variable header and payload
	Len       int  // bytes the fixed header itself took: 2 to 5
}

// Size is the whole packet's length: fixed header plus remaining length.
func (h Header) Size() int { return h.Len + h.Remaining }

var (
	errReservedType = malformed("MQTT-2.1.3-1", "reserved control packet type 0")
	errAuthV3       = malformed("MQTT-2.1.3-1", "control packet type 15 is reserved before MQTT 5.0")
	errFlags        = malformed("MQTT-2.1.3-1", "reserved fixed header flags set")
	errQoS3         = malformed("MQTT-3.3.1-4", "PUBLISH with QoS 3")
	errDupQoS0      = malformed("MQTT-3.3.1-2", "DUP flag set on a QoS 0 PUBLISH")
)

// requiredFlags lists the fixed-header flags each type must carry: PUBREL, SUBSCRIBE and
// UNSUBSCRIBE carry 0b0010, all others but PUBLISH 0 [MQTT-2.1.3-1] (3.1.1: [MQTT-2.2.2-1],
// [MQTT-3.6.1-1], [MQTT-3.8.1-1], [MQTT-3.10.1-1]).
var requiredFlags = [16]byte{PUBREL: 2, SUBSCRIBE: 2, UNSUBSCRIBE: 2}

// checkTypeFlags validates the first byte of a fixed header for version v.
func checkTypeFlags(b byte, v Version) error {
	t, flags := Type(b>>4), b&0x0f
	switch {
	case t == 0:
		return errReservedType
	case t == AUTH && v != V5 && v != 0:
		return errAuthV3
	case t == PUBLISH:
		qos := flags >> 1 & 3
		if qos == 3 {
			return errQoS3
		}
		if qos == 0 && flags&8 != 0 && v == V5 {
			// 3.1.1 says the same [MQTT-3.3.1-2] but old clients set DUP on QoS 0, and
			// the flag is harmless there; MQTT 5 brokers must reject it.
			return errDupQoS0
		}
	case flags != requiredFlags[t]:
		return errFlags
	}
	return nil
}

// ParseHeader decodes a fixed header from the start of b for protocol version v (0 when
// not yet known, before CONNECT). It returns n == 0 and a nil error while b holds too few
// bytes to tell; a complete header yields n == h.Len.
func ParseHeader(b []byte, v Version) (h Header, n int, err error) {
	if len(b) < 2 {
		return h, 0, nil
	}
	if err := checkTypeFlags(b[0], v); err != nil {
		return h, 0, err
	}
	rem, m, err := uvarint(b[1:])
	if err != nil || m == 0 {
		return h, 0, err
	}
	return Header{Type: Type(b[0] >> 4), Flags: b[0] & 0x0f, Remaining: int(rem), Len: 1 + m}, 1 + m, nil
}

// appendHeader appends a fixed header with the given first byte and remaining length.
func appendHeader(dst []byte, first byte, remaining int) []byte {
	return appendUvarint(append(dst, first), uint32(remaining))
}

// headerLen is the fixed header's length for a body of the given length.
func headerLen(remaining int) int { return 1 + uvarintLen(uint32(remaining)) }
