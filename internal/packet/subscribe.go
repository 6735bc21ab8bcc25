package packet

// Subscription is one topic filter of a SUBSCRIBE with its options (spec 3.8.3.1).
type Subscription struct {
	Filter            []byte
	QoS               byte // maximum QoS
	NoLocal           bool // 5.0
	RetainAsPublished bool // 5.0
	RetainHandling    byte // 5.0: 0 send retained, 1 only for a new subscription, 2 never
}

// Subscribe is the SUBSCRIBE packet (spec 3.8).
type Subscribe struct {
	PacketID      uint16
	Props         Properties
	Subscriptions []Subscription
}

var (
	errSubscribeEmpty = protocolErr("MQTT-3.8.3-2", "SUBSCRIBE without a topic filter")
	errSubOptionsV3   = malformed("MQTT-3.8.3-4", "SUBSCRIBE reserved option bits set")
	errSubOptionsV5   = malformed("MQTT-3.8.3-5", "SUBSCRIBE reserved option bits set")
	errSubQoS         = malformed("MQTT-3.8.3-4", "SUBSCRIBE with QoS 3")
	errRetainHandling = protocolErr("MQTT-3.8.3-5", "retain handling 3")
	errSharedNoLocal  = protocolErr("MQTT-3.8.3-4", "no local on a shared subscription")
)

// Type implements Packet.
func (*Subscribe) Type() Type { return SUBSCRIBE }

// Decode implements Packet.
func (s *Subscribe) Decode(h Header, body []byte, v Version) error {
	s.Subscriptions = s.Subscriptions[:0]
	s.Props.Reset()
	r := cursor{b: body}
	var err error
	if s.PacketID, err = r.u16(); err != nil {
		return err
	}
	if s.PacketID == 0 {
		return errPacketIDZero
	}
	if v == V5 {
		if err := s.Props.decode(&r, SUBSCRIBE); err != nil {
			return err
		}
	}
	if r.left() == 0 {
		return errSubscribeEmpty // 3.1.1: [MQTT-3.8.3-3]
	}
	for r.left() > 0 {
		f, err := r.str()
		if err != nil {
			return err
		}
		if err := ValidTopicFilter(f); err != nil {
			return err
		}
		o, err := r.u8()
		if err != nil {
			return err
		}
		sub := Subscription{Filter: f, QoS: o & 3}
		if v == V5 {
			if o&0xc0 != 0 {
				return errSubOptionsV5
			}
			sub.NoLocal = o&0x04 != 0
			sub.RetainAsPublished = o&0x08 != 0
			sub.RetainHandling = o >> 4 & 3
			if sub.RetainHandling == 3 {
				return errRetainHandling
			}
			if _, _, shared := SplitShared(f); shared && sub.NoLocal {
				return errSharedNoLocal
			}
		} else if o&0xfc != 0 {
			return errSubOptionsV3
		}
		if sub.QoS == 3 {
			return errSubQoS
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	return nil
}

func (s *Subscribe) bodySize(v Version) int {
	n := 2
	if v == V5 {
		n += s.Props.sectionSize(SUBSCRIBE)
	}
	for i := range s.Subscriptions {
		n += 3 + len(s.Subscriptions[i].Filter)
	}
	return n
}

// Size implements Packet.
func (s *Subscribe) Size(v Version) int { n := s.bodySize(v); return headerLen(n) + n }

// AppendTo implements Packet.
func (s *Subscribe) AppendTo(dst []byte, v Version) []byte {
	dst = appendU16(appendHeader(dst, byte(SUBSCRIBE)<<4|2, s.bodySize(v)), s.PacketID)
	if v == V5 {
		dst = s.Props.appendTo(dst, SUBSCRIBE)
	}
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		o := sub.QoS & 3
		if v == V5 {
			o |= sub.RetainHandling & 3 << 4
			if sub.NoLocal {
				o |= 0x04
			}
			if sub.RetainAsPublished {
				o |= 0x08
			}
		}
		dst = append(appendBin(dst, sub.Filter), o)
	}
	return dst
}

// Suback is the SUBACK packet (spec 3.9): one reason code per subscription, in order.
// Before 5.0 the codes are granted QoS 0, 1, 2 or 0x80 (failure).
type Suback struct {
	PacketID uint16
	Props    Properties
	Codes    []ReasonCode
}

var errSubackCode = malformed("MQTT-3.9.3-2", "SUBACK reason code not allowed")

// Type implements Packet.
func (*Suback) Type() Type { return SUBACK }

// Decode implements Packet.
func (s *Suback) Decode(h Header, body []byte, v Version) error {
	s.Codes = s.Codes[:0]
	s.Props.Reset()
	r := cursor{b: body}
	var err error
	if s.PacketID, err = r.u16(); err != nil {
		return err
	}
	if s.PacketID == 0 {
		return errPacketIDZero
	}
	if v == V5 {
		if err := s.Props.decode(&r, SUBACK); err != nil {
			return err
		}
	}
	for r.left() > 0 {
		c, _ := r.u8()
		code := ReasonCode(c)
		if v == V5 && !code.validFor(SUBACK) || v != V5 && code > GrantedQoS2 && code != UnspecifiedError {
			return errSubackCode
		}
		s.Codes = append(s.Codes, code)
	}
	return nil
}

func (s *Suback) bodySize(v Version) int {
	n := 2 + len(s.Codes)
	if v == V5 {
		n += s.Props.sectionSize(SUBACK)
	}
	return n
}

// Size implements Packet.
func (s *Suback) Size(v Version) int { n := s.bodySize(v); return headerLen(n) + n }

// AppendTo implements Packet. Before 5.0 every failure code is written as 0x80.
func (s *Suback) AppendTo(dst []byte, v Version) []byte {
	dst = appendU16(appendHeader(dst, byte(SUBACK)<<4, s.bodySize(v)), s.PacketID)
	if v == V5 {
		dst = s.Props.appendTo(dst, SUBACK)
	}
	for _, c := range s.Codes {
		if v != V5 && c.IsError() {
			c = UnspecifiedError
		}
		dst = append(dst, byte(c))
	}
	return dst
}
