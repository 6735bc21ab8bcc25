package packet

// PropID identifies an MQTT 5.0 property (spec 2.2.2.2). Wire values: append-only.
type PropID byte

// The property identifiers.
const (
	PropPayloadFormat        PropID = 0x01
	PropMessageExpiry        PropID = 0x02
	PropContentType          PropID = 0x03
	PropResponseTopic        PropID = 0x08
	PropCorrelationData      PropID = 0x09
	PropSubscriptionID       PropID = 0x0B
	PropSessionExpiry        PropID = 0x11
	PropAssignedClientID     PropID = 0x12
	PropServerKeepAlive      PropID = 0x13
	PropAuthMethod           PropID = 0x15
	PropAuthData             PropID = 0x16
	PropRequestProblemInfo   PropID = 0x17
	PropWillDelay            PropID = 0x18
	PropRequestResponseInfo  PropID = 0x19
	PropResponseInfo         PropID = 0x1A
	PropServerReference      PropID = 0x1C
	PropReasonString         PropID = 0x1F
	PropReceiveMaximum       PropID = 0x21
	PropTopicAliasMaximum    PropID = 0x22
	PropTopicAlias           PropID = 0x23
	PropMaximumQoS           PropID = 0x24
	PropRetainAvailable      PropID = 0x25
	PropUser                 PropID = 0x26
	PropMaximumPacketSize    PropID = 0x27
	PropWildcardSubAvailable PropID = 0x28
	PropSubIDAvailable       PropID = 0x29
	PropSharedSubAvailable   PropID = 0x2A
	maxPropID                       = 0x2A
)

// willKind stands for the will properties of CONNECT in the table of where a property may
// appear; it takes the unused type slot 0.
const willKind = 0

// propAllowed[id] has bit t set when packet type t may carry property id (spec 2.2.2.2,
// table 2-4); bit 0 stands for will properties.
var propAllowed = [maxPropID + 1]uint16{
	PropPayloadFormat:        1<<PUBLISH | 1<<willKind,
	PropMessageExpiry:        1<<PUBLISH | 1<<willKind,
	PropContentType:          1<<PUBLISH | 1<<willKind,
	PropResponseTopic:        1<<PUBLISH | 1<<willKind,
	PropCorrelationData:      1<<PUBLISH | 1<<willKind,
	PropSubscriptionID:       1<<PUBLISH | 1<<SUBSCRIBE,
	PropSessionExpiry:        1<<CONNECT | 1<<CONNACK | 1<<DISCONNECT,
	PropAssignedClientID:     1 << CONNACK,
	PropServerKeepAlive:      1 << CONNACK,
	PropAuthMethod:           1<<CONNECT | 1<<CONNACK | 1<<AUTH,
	PropAuthData:             1<<CONNECT | 1<<CONNACK | 1<<AUTH,
	PropRequestProblemInfo:   1 << CONNECT,
	PropWillDelay:            1 << willKind,
	PropRequestResponseInfo:  1 << CONNECT,
	PropResponseInfo:         1 << CONNACK,
	PropServerReference:      1<<CONNACK | 1<<DISCONNECT,
	PropReasonString:         1<<CONNACK | 1<<PUBACK | 1<<PUBREC | 1<<PUBREL | 1<<PUBCOMP | 1<<SUBACK | 1<<UNSUBACK | 1<<DISCONNECT | 1<<AUTH,
	PropReceiveMaximum:       1<<CONNECT | 1<<CONNACK,
	PropTopicAliasMaximum:    1<<CONNECT | 1<<CONNACK,
	PropTopicAlias:           1 << PUBLISH,
	PropMaximumQoS:           1 << CONNACK,
	PropRetainAvailable:      1 << CONNACK,
	PropUser:                 0xffff &^ (1<<PINGREQ | 1<<PINGRESP),
	PropMaximumPacketSize:    1<<CONNECT | 1<<CONNACK,
	PropWildcardSubAvailable: 1 << CONNACK,
	PropSubIDAvailable:       1 << CONNACK,
	PropSharedSubAvailable:   1 << CONNACK,
}

// Opt is an optional property value: the spec gives absent properties defaults that
// differ from zero (an absent Receive Maximum is 65,535, an absent Maximum QoS is 2), so
// presence is recorded next to the value.
type Opt[T uint8 | uint16 | uint32] struct {
	V   T
	Set bool
}

// Some returns a present value.
func Some[T uint8 | uint16 | uint32](v T) Opt[T] { return Opt[T]{v, true} }

// Get returns the value, or def when absent.
func (o Opt[T]) Get(def T) T {
	if o.Set {
		return o.V
	}
	return def
}

// UserProperty is one name/value pair; names may repeat and order is kept.
type UserProperty struct {
	Key, Value []byte
}

// Properties holds the MQTT 5.0 properties of a packet. Byte-slice fields are absent when
// nil. Only properties that the packet type allows are decoded or encoded; others are a
// malformed packet on decode and ignored on encode.
//
// Fields are ordered by size for alignment: slices, then 4-, 2- and 1-byte options.
type Properties struct {
	ContentType      []byte
	ResponseTopic    []byte
	CorrelationData  []byte
	AssignedClientID []byte
	AuthMethod       []byte
	AuthData         []byte
	ResponseInfo     []byte
	ServerReference  []byte
	ReasonString     []byte
	// SubscriptionIDs: one in SUBSCRIBE; any number in a PUBLISH to a client.
	SubscriptionIDs []uint32
	User            []UserProperty

	MessageExpiry     Opt[uint32]
	SessionExpiry     Opt[uint32]
	WillDelay         Opt[uint32]
	MaximumPacketSize Opt[uint32]

	ReceiveMaximum    Opt[uint16]
	TopicAliasMaximum Opt[uint16]
	TopicAlias        Opt[uint16]
	ServerKeepAlive   Opt[uint16]

	PayloadFormat        Opt[uint8]
	RequestProblemInfo   Opt[uint8]
	RequestResponseInfo  Opt[uint8]
	MaximumQoS           Opt[uint8]
	RetainAvailable      Opt[uint8]
	WildcardSubAvailable Opt[uint8]
	SubIDAvailable       Opt[uint8]
	SharedSubAvailable   Opt[uint8]
}

// Reset clears p, keeping the capacity of its repeated fields for reuse.
func (p *Properties) Reset() {
	subs, user := p.SubscriptionIDs[:0], p.User[:0]
	*p = Properties{SubscriptionIDs: subs, User: user}
}

var (
	errPropNotAllowed = malformed("MQTT-2.2.2-2", "property not allowed in this packet")
	errPropUnknown    = malformed("MQTT-2.2.2-2", "unknown property identifier")
	errPropDuplicate  = protocolErr("MQTT-2.2.2-2", "property included more than once")
	errPropBool       = protocolErr("", "property value other than 0 or 1")
	errPropZero       = protocolErr("", "property value 0 where the spec forbids it")
	// Spec 3.3.4: "A Topic Alias value of 0 or greater than the Maximum Topic Alias is a
	// Protocol Error, the receiver uses DISCONNECT with Reason Code of 0x94 (Topic Alias
	// invalid)".
	errTopicAliasZero = &Error{TopicAliasInvalid, "MQTT-3.3.2-8", "topic alias 0"}
	errPropSubID      = protocolErr("MQTT-3.8.2-1", "subscription identifier 0 or above 268,435,455")
	errPropLength     = malformed("MQTT-2.2.2-1", "property length exceeds the packet")
)

// decode reads a property section, length included, for packet type t (willKind for will
// properties).
func (p *Properties) decode(c *cursor, t Type) error {
	p.Reset()
	n, err := c.varint()
	if err != nil {
		return err
	}
	if int(n) > c.left() {
		return errPropLength
	}
	end := c.i + int(n)
	pc := cursor{b: c.b[:end], i: c.i}
	c.i = end
	return p.decodeBody(&pc, t)
}

// DecodeRaw decodes properties for packet type t as AppendRaw encodes them, without the
// length prefix: the form a PUBLISH's pass-through properties are kept in
// (session.Message.Props). Byte-slice fields point into raw.
func (p *Properties) DecodeRaw(raw []byte, t Type) error {
	p.Reset()
	return p.decodeBody(&cursor{b: raw}, t)
}

// decodeBody reads properties for packet type t up to the end of c.
func (p *Properties) decodeBody(pc *cursor, t Type) error {
	var seen uint64
	for pc.left() > 0 {
		idv, err := pc.varint()
		if err != nil {
			return err
		}
		if idv > maxPropID || propAllowed[idv] == 0 {
			return errPropUnknown
		}
		id := PropID(idv)
		if propAllowed[id]&(1<<t) == 0 {
			return errPropNotAllowed
		}
		if seen&(1<<id) != 0 && id != PropUser && (id != PropSubscriptionID || t != PUBLISH) {
			return errPropDuplicate
		}
		seen |= 1 << id
		if err := p.decodeOne(pc, id); err != nil {
			return err
		}
	}
	return nil
}

// decodeOne reads the value of property id by its wire type and checks its range.
func (p *Properties) decodeOne(c *cursor, id PropID) (err error) {
	switch id {
	case PropRequestProblemInfo, PropRequestResponseInfo, PropMaximumQoS,
		PropRetainAvailable, PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable:
		v, err := c.u8()
		if err != nil {
			return err
		}
		if v > 1 {
			// "It is a Protocol Error to include [it] more than once, or to have a value
			// other than 0 or 1": spec 3.1.2.11.6/7, 3.2.2.3.4/5/11/12/13.
			return errPropBool
		}
		*p.u8Field(id) = Some(v)
	case PropPayloadFormat:
		// Every value is accepted and kept. The spec describes 0 and 1 (3.3.2.3.2, will:
		// 3.1.3.2.3) but, unlike the properties above, makes no other value an error, and
		// a server forwards the indicator unaltered [MQTT-3.3.2-4], as Mosquitto does.
		v, err := c.u8()
		if err != nil {
			return err
		}
		p.PayloadFormat = Some(v)
	case PropReceiveMaximum, PropTopicAliasMaximum, PropTopicAlias, PropServerKeepAlive:
		v, err := c.u16()
		if err != nil {
			return err
		}
		if v == 0 && id == PropTopicAlias {
			return errTopicAliasZero
		}
		if v == 0 && id == PropReceiveMaximum {
			return errPropZero // spec 3.1.2.11.3, 3.2.2.3.3
		}
		*p.u16Field(id) = Some(v)
	case PropMessageExpiry, PropSessionExpiry, PropWillDelay, PropMaximumPacketSize:
		v, err := c.u32()
		if err != nil {
			return err
		}
		if v == 0 && id == PropMaximumPacketSize {
			return errPropZero // 3.1.2.11.4, 3.2.2.3.6
		}
		*p.u32Field(id) = Some(v)
	case PropSubscriptionID:
		v, err := c.varint()
		if err != nil {
			return err
		}
		if v == 0 {
			return errPropSubID
		}
		p.SubscriptionIDs = append(p.SubscriptionIDs, v)
	case PropCorrelationData, PropAuthData:
		v, err := c.bin()
		if err != nil {
			return err
		}
		*p.bytesField(id) = v
	case PropUser:
		k, err := c.str()
		if err != nil {
			return err
		}
		v, err := c.str()
		if err != nil {
			return err
		}
		p.User = append(p.User, UserProperty{k, v})
	default: // the UTF-8 string properties
		v, err := c.str()
		if err != nil {
			return err
		}
		if id == PropResponseTopic {
			if err := ValidTopicName(v); err != nil {
				return err // 3.3.2.3.5: a Topic Name, so no wildcards
			}
		}
		*p.bytesField(id) = v
	}
	return nil
}

func (p *Properties) u8Field(id PropID) *Opt[uint8] {
	switch id {
	case PropPayloadFormat:
		return &p.PayloadFormat
	case PropRequestProblemInfo:
		return &p.RequestProblemInfo
	case PropRequestResponseInfo:
		return &p.RequestResponseInfo
	case PropMaximumQoS:
		return &p.MaximumQoS
	case PropRetainAvailable:
		return &p.RetainAvailable
	case PropWildcardSubAvailable:
		return &p.WildcardSubAvailable
	case PropSubIDAvailable:
		return &p.SubIDAvailable
	}
	return &p.SharedSubAvailable
}

func (p *Properties) u16Field(id PropID) *Opt[uint16] {
	switch id {
	case PropReceiveMaximum:
		return &p.ReceiveMaximum
	case PropTopicAliasMaximum:
		return &p.TopicAliasMaximum
	case PropTopicAlias:
		return &p.TopicAlias
	}
	return &p.ServerKeepAlive
}

func (p *Properties) u32Field(id PropID) *Opt[uint32] {
	switch id {
	case PropMessageExpiry:
		return &p.MessageExpiry
	case PropSessionExpiry:
		return &p.SessionExpiry
	case PropWillDelay:
		return &p.WillDelay
	}
	return &p.MaximumPacketSize
}

func (p *Properties) bytesField(id PropID) *[]byte {
	switch id {
	case PropContentType:
		return &p.ContentType
	case PropResponseTopic:
		return &p.ResponseTopic
	case PropCorrelationData:
		return &p.CorrelationData
	case PropAssignedClientID:
		return &p.AssignedClientID
	case PropAuthMethod:
		return &p.AuthMethod
	case PropAuthData:
		return &p.AuthData
	case PropResponseInfo:
		return &p.ResponseInfo
	case PropServerReference:
		return &p.ServerReference
	}
	return &p.ReasonString
}

// propOrder lists the properties in the order they are encoded: by identifier.
var propOrder = [...]PropID{PropPayloadFormat, PropMessageExpiry, PropContentType,
	PropResponseTopic, PropCorrelationData, PropSubscriptionID, PropSessionExpiry,
	PropAssignedClientID, PropServerKeepAlive, PropAuthMethod, PropAuthData,
	PropRequestProblemInfo, PropWillDelay, PropRequestResponseInfo, PropResponseInfo,
	PropServerReference, PropReasonString, PropReceiveMaximum, PropTopicAliasMaximum,
	PropTopicAlias, PropMaximumQoS, PropRetainAvailable, PropUser, PropMaximumPacketSize,
	PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable}

// propsOf[t] lists, in encoding order, the properties packet type t may carry (t = 0: will
// properties), so that encoding a PUBACK looks at its two possible properties, not all 27.
var propsOf = func() (l [16][]PropID) {
	for t := range l {
		for _, id := range propOrder {
			if propAllowed[id]&(1<<t) != 0 {
				l[t] = append(l[t], id)
			}
		}
	}
	return l
}()

// propKind is a property's wire type.
type propKind byte

const (
	kindByte propKind = iota
	kindU16
	kindU32
	kindVarint
	kindBytes // UTF-8 string or binary data
	kindPair
)

var propKinds = [maxPropID + 1]propKind{
	PropMessageExpiry: kindU32, PropSessionExpiry: kindU32, PropWillDelay: kindU32,
	PropMaximumPacketSize: kindU32,
	PropServerKeepAlive:   kindU16, PropReceiveMaximum: kindU16, PropTopicAliasMaximum: kindU16,
	PropTopicAlias:     kindU16,
	PropSubscriptionID: kindVarint,
	PropContentType:    kindBytes, PropResponseTopic: kindBytes, PropCorrelationData: kindBytes,
	PropAssignedClientID: kindBytes, PropAuthMethod: kindBytes, PropAuthData: kindBytes,
	PropResponseInfo: kindBytes, PropServerReference: kindBytes, PropReasonString: kindBytes,
	PropUser: kindPair,
}

// walk calls fn for every property of p that packet type t may carry, in encoding order,
// once per value of a repeated property. It is the one place that knows the encoding order
// and which properties a packet drops, so size and appendTo cannot disagree.
func (p *Properties) walk(t Type, fn func(id PropID, i int)) {
	for _, id := range propsOf[t] {
		switch propKinds[id] {
		case kindByte:
			if p.u8Field(id).Set {
				fn(id, 0)
			}
		case kindU16:
			if p.u16Field(id).Set {
				fn(id, 0)
			}
		case kindU32:
			if p.u32Field(id).Set {
				fn(id, 0)
			}
		case kindVarint:
			for i := range p.SubscriptionIDs {
				fn(id, i)
			}
		case kindBytes:
			if *p.bytesField(id) != nil {
				fn(id, 0)
			}
		case kindPair:
			for i := range p.User {
				fn(id, i)
			}
		}
	}
}

// size is the encoded length of the properties allowed in packet type t, without the
// property-length prefix.
func (p *Properties) size(t Type) int {
	n := 0
	p.walk(t, func(id PropID, i int) {
		switch propKinds[id] {
		case kindByte:
			n += 2
		case kindU16:
			n += 3
		case kindU32:
			n += 5
		case kindVarint:
			n += 1 + uvarintLen(p.SubscriptionIDs[i])
		case kindBytes:
			n += 3 + len(*p.bytesField(id))
		case kindPair:
			n += 5 + len(p.User[i].Key) + len(p.User[i].Value)
		}
	})
	return n
}

// appendTo appends the property section, length prefix included, for packet type t.
func (p *Properties) appendTo(dst []byte, t Type) []byte {
	return p.AppendRaw(appendUvarint(dst, uint32(p.size(t))), t)
}

// RawSize is the number of bytes AppendRaw appends for packet type t.
func (p *Properties) RawSize(t Type) int { return p.size(t) }

// AppendRaw appends the properties packet type t may carry, encoded, without the
// property-length prefix: the form Publish.RawProps takes.
func (p *Properties) AppendRaw(dst []byte, t Type) []byte {
	p.walk(t, func(id PropID, i int) {
		dst = append(dst, byte(id))
		switch propKinds[id] {
		case kindByte:
			dst = append(dst, p.u8Field(id).V)
		case kindU16:
			dst = appendU16(dst, p.u16Field(id).V)
		case kindU32:
			dst = appendU32(dst, p.u32Field(id).V)
		case kindVarint:
			dst = appendUvarint(dst, p.SubscriptionIDs[i])
		case kindBytes:
			dst = appendBin(dst, *p.bytesField(id))
		case kindPair:
			dst = appendBin(appendBin(dst, p.User[i].Key), p.User[i].Value)
		}
	})
	return dst
}

// sectionSize is the property section's length with its length prefix.
func (p *Properties) sectionSize(t Type) int {
	n := p.size(t)
	return uvarintLen(uint32(n)) + n
}
