// Package packet is bifrost's MQTT codec for protocol versions 3.1, 3.1.1 and 5.0.
//
// Decoding happens in place: a decoded packet's byte-slice fields (topics, payloads, client
// ids, property strings) point into the buffer the packet was read from, and are valid only
// as long as that buffer is. Callers that keep a field copy it once (the broker copies a
// PUBLISH into its immutable message exactly once). Decoding into a reused packet value
// allocates nothing: repeated fields (user properties, subscriptions) reuse their slices'
// capacity.
//
// Encoding appends to a caller-supplied buffer (AppendTo), so a writer that reuses its
// buffer allocates nothing either. Size reports a packet's encoded length up front, which
// is what the maximum-packet-size rules need.
//
// Every rule a codec can check is checked here and tagged with its spec id, e.g.
// [MQTT-3.3.2-2]. A violation is an *Error carrying the reason code the spec prescribes,
// usually MalformedPacket (0x81) or ProtocolError (0x82); rules that need session state
// (packet-id reuse, topic-alias ranges, receive maximum) belong to the session.
//
// The fixed header, common to every packet:
//
//	bit     7   6   5   4   3   2   1   0
//	byte 1  [ packet type ] [    flags    ]
//	byte 2… remaining length, a variable byte integer of 1 to 4 bytes
//	        (7 bits per byte, low first, bit 7 set while more follow)
//	then    variable header and payload: remaining-length bytes
package packet

// Version is the protocol level byte of CONNECT.
type Version byte

// The protocol versions bifrost speaks. Append-only wire values.
const (
	V31  Version = 3 // MQTT 3.1, protocol name "MQIsdp"
	V311 Version = 4 // MQTT 3.1.1, protocol name "MQTT"
	V5   Version = 5 // MQTT 5.0, protocol name "MQTT"
)

// String names the version as users know it.
func (v Version) String() string {
	switch v {
	case V31:
		return "3.1"
	case V311:
		return "3.1.1"
	case V5:
		return "5.0"
	}
	return "unknown"
}

// Type is an MQTT control packet type, the high nibble of the first byte.
type Type byte

// The control packet types. Wire values: append-only.
const (
	CONNECT     Type = 1
	CONNACK     Type = 2
	PUBLISH     Type = 3
	PUBACK      Type = 4
	PUBREC      Type = 5
	PUBREL      Type = 6
	PUBCOMP     Type = 7
	SUBSCRIBE   Type = 8
	SUBACK      Type = 9
	UNSUBSCRIBE Type = 10
	UNSUBACK    Type = 11
	PINGREQ     Type = 12
	PINGRESP    Type = 13
	DISCONNECT  Type = 14
	AUTH        Type = 15 // MQTT 5.0 only
)

var typeNames = [16]string{"RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC",
	"PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ",
	"PINGRESP", "DISCONNECT", "AUTH"}

// String returns the packet type's name as the spec writes it.
func (t Type) String() string {
	if t > 15 {
		return "INVALID"
	}
	return typeNames[t]
}

// MaxRemainingLength is the largest remaining length a 4-byte variable byte integer holds.
const MaxRemainingLength = 268_435_455

// MaxPacketSize is the largest possible packet: a 5-byte fixed header and the largest body.
const MaxPacketSize = MaxRemainingLength + 5

// Packet is implemented by every control packet struct. Decoding a specific type into a
// reused value (p.Decode) is the allocation-free path; Decode (the function) is the
// convenient one for tests and tools.
type Packet interface {
	// Type reports the control packet type.
	Type() Type
	// Size is the packet's encoded length in bytes for protocol version v, fixed header
	// included.
	Size(v Version) int
	// AppendTo appends the encoded packet to dst and returns the extended buffer.
	AppendTo(dst []byte, v Version) []byte
	// Decode decodes the packet from the fixed header h and its body, for version v.
	Decode(h Header, body []byte, v Version) error
}

// New returns a zero packet of type t, or nil for an invalid type.
func New(t Type) Packet {
	switch t {
	case CONNECT:
		return new(Connect)
	case CONNACK:
		return new(Connack)
	case PUBLISH:
		return new(Publish)
	case PUBACK, PUBREC, PUBREL, PUBCOMP:
		return &Ack{PacketType: t}
	case SUBSCRIBE:
		return new(Subscribe)
	case SUBACK:
		return new(Suback)
	case UNSUBSCRIBE:
		return new(Unsubscribe)
	case UNSUBACK:
		return new(Unsuback)
	case PINGREQ:
		return new(Pingreq)
	case PINGRESP:
		return new(Pingresp)
	case DISCONNECT:
		return new(Disconnect)
	case AUTH:
		return new(Auth)
	}
	return nil
}

// Decode decodes one packet of any type, allocating a new value for it. The header must
// come from ParseHeader (or a Reader), which has already validated the type and flags.
func Decode(h Header, body []byte, v Version) (Packet, error) {
	p := New(h.Type)
	if p == nil {
		return nil, errReservedType
	}
	if err := p.Decode(h, body, v); err != nil {
		return nil, err
	}
	return p, nil
}

// Append encodes p for version v onto dst.
func Append(dst []byte, p Packet, v Version) []byte { return p.AppendTo(dst, v) }
