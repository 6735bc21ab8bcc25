package packet

// Unsubscribe is the UNSUBSCRIBE packet (spec 3.10).
type Unsubscribe struct {
	PacketID uint16
	Props    Properties
	Filters  [][]byte
}

var errUnsubscribeEmpty = protocolErr("MQTT-3.10.3-2", "UNSUBSCRIBE without a topic filter")

// Type implements Packet.
func (*Unsubscribe) Type() Type { return UNSUBSCRIBE }

// Decode implements Packet.
func (u *Unsubscribe) Decode(h Header, body []byte, v Version) error {
	u.Filters = u.Filters[:0]
	u.Props.Reset()
	r := cursor{b: body}
	var err error
	if u.PacketID, err = r.u16(); err != nil {
		return err
	}
	if u.PacketID == 0 {
		return errPacketIDZero
	}
	if v == V5 {
		if err := u.Props.decode(&r, UNSUBSCRIBE); err != nil {
			return err
		}
	}
	if r.left() == 0 {
		return errUnsubscribeEmpty
	}
	for r.left() > 0 {
		f, err := r.str()
		if err != nil {
			return err
		}
		if err := ValidTopicFilter(f); err != nil {
			return err
		}
		u.Filters = append(u.Filters, f)
	}
	return nil
}

func (u *Unsubscribe) bodySize(v Version) int {
	n := 2
	if v == V5 {
		n += u.Props.sectionSize(UNSUBSCRIBE)
	}
	for _, f := range u.Filters {
		n += 2 + len(f)
	}
	return n
}

// Size implements Packet.
func (u *Unsubscribe) Size(v Version) int { n := u.bodySize(v); return headerLen(n) + n }

// AppendTo implements Packet.
func (u *Unsubscribe) AppendTo(dst []byte, v Version) []byte {
	dst = appendU16(appendHeader(dst, byte(UNSUBSCRIBE)<<4|2, u.bodySize(v)), u.PacketID)
	if v == V5 {
		dst = u.Props.appendTo(dst, UNSUBSCRIBE)
	}
	for _, f := range u.Filters {
		dst = appendBin(dst, f)
	}
	return dst
}

// Unsuback is the UNSUBACK packet (spec 3.11). Before 5.0 it carries only the packet
// identifier; Codes are then neither written nor read.
type Unsuback struct {
	PacketID uint16
	Props    Properties
	Codes    []ReasonCode
}

var errUnsubackCode = malformed("MQTT-3.11.3-2", "UNSUBACK reason code not allowed")

// Type implements Packet.
func (*Unsuback) Type() Type { return UNSUBACK }

// Decode implements Packet.
func (u *Unsuback) Decode(h Header, body []byte, v Version) error {
	u.Codes = u.Codes[:0]
	u.Props.Reset()
	r := cursor{b: body}
	var err error
	if u.PacketID, err = r.u16(); err != nil {
		return err
	}
	if u.PacketID == 0 {
		return errPacketIDZero
	}
	if v != V5 {
		return r.end()
	}
	if err := u.Props.decode(&r, UNSUBACK); err != nil {
		return err
	}
	for r.left() > 0 {
		c, _ := r.u8()
		if !ReasonCode(c).validFor(UNSUBACK) {
			return errUnsubackCode
		}
		u.Codes = append(u.Codes, ReasonCode(c))
	}
	return nil
}

func (u *Unsuback) bodySize(v Version) int {
	if v != V5 {
		return 2
	}
	return 2 + u.Props.sectionSize(UNSUBACK) + len(u.Codes)
}

// Size implements Packet.
func (u *Unsuback) Size(v Version) int { n := u.bodySize(v); return headerLen(n) + n }

// AppendTo implements Packet.
func (u *Unsuback) AppendTo(dst []byte, v Version) []byte {
	dst = appendU16(appendHeader(dst, byte(UNSUBACK)<<4, u.bodySize(v)), u.PacketID)
	if v != V5 {
		return dst
	}
	dst = u.Props.appendTo(dst, UNSUBACK)
	for _, c := range u.Codes {
		dst = append(dst, byte(c))
	}
	return dst
}
