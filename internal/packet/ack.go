package packet

// Ack is one of the four packets that acknowledge a PUBLISH: PUBACK (3.4), PUBREC (3.5),
// PUBREL (3.6) and PUBCOMP (3.7). They share one layout: a packet identifier and, in 5.0,
// a reason code and properties that may be left out when they are Success and empty.
type Ack struct {
	PacketType Type
	PacketID   uint16
	Code       ReasonCode
	Props      Properties
}

var errAckCode = malformed("MQTT-3.4.2-1", "reason code not allowed in this acknowledgement")

// Type implements Packet.
func (a *Ack) Type() Type { return a.PacketType }

// Decode implements Packet.
func (a *Ack) Decode(h Header, body []byte, v Version) error {
	a.PacketType = h.Type
	a.Code = Success
	a.Props.Reset()
	r := cursor{b: body}
	var err error
	if a.PacketID, err = r.u16(); err != nil {
		return err
	}
	if a.PacketID == 0 {
		return errPacketIDZero
	}
	if v != V5 {
		return r.end()
	}
	if r.left() == 0 {
		return nil // spec 3.4.2.1: no reason code means 0x00
	}
	code, _ := r.u8()
	a.Code = ReasonCode(code)
	if !a.Code.validFor(a.PacketType) {
		return errAckCode
	}
	if r.left() == 0 {
		return nil // spec 3.4.2.2.1: no property length means none
	}
	if err := a.Props.decode(&r, a.PacketType); err != nil {
		return err
	}
	return r.end()
}

// bodySize omits what 5.0 lets a sender omit: the properties when there are none, and
// then the reason code too when it is Success (spec 3.4.2.1).
func (a *Ack) bodySize(v Version) int {
	if v != V5 {
		return 2
	}
	if pn := a.Props.size(a.PacketType); pn > 0 {
		return 3 + uvarintLen(uint32(pn)) + pn
	}
	if a.Code != Success {
		return 3
	}
	return 2
}

// Size implements Packet.
func (a *Ack) Size(v Version) int { n := a.bodySize(v); return headerLen(n) + n }

// AppendTo implements Packet.
func (a *Ack) AppendTo(dst []byte, v Version) []byte {
	n := a.bodySize(v)
	dst = appendU16(appendHeader(dst, byte(a.PacketType)<<4|requiredFlags[a.PacketType], n), a.PacketID)
	if n > 2 {
		dst = append(dst, byte(a.Code))
	}
	if n > 3 {
		dst = a.Props.appendTo(dst, a.PacketType)
	}
	return dst
}
