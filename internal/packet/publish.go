package packet

// Publish is the PUBLISH packet (spec 3.3). Topic may be empty in 5.0 when Props.TopicAlias
// names it [MQTT-3.3.2-1]; resolving an alias is the session's work.
type Publish struct {
	Topic   []byte
	Payload []byte
	Props   Properties
	// RawProps are properties already encoded (see Properties.AppendRaw), written after
	// Props in 5.0. A broker keeps a message's pass-through properties encoded once and
	// adds only the per-recipient ones (alias, expiry, subscription ids) in Props, instead
	// of re-encoding them for every subscriber. Decode leaves it nil.
	RawProps []byte
	PacketID uint16 // QoS 1 and 2 only
	QoS      byte
	Dup      bool
	Retain   bool
}

var (
	errPacketIDZero = protocolErr("MQTT-2.2.1-3", "packet identifier 0")
	errTopicAlias   = protocolErr("MQTT-3.3.2-1", "empty topic name without a topic alias")
	errClientSubID  = protocolErr("MQTT-3.3.4-6", "subscription identifier in a PUBLISH from a client")
)

// Type implements Packet.
func (*Publish) Type() Type { return PUBLISH }

// Decode implements Packet. It checks everything but the payload: a payload whose Payload
// Format Indicator is 1 says it is UTF-8, which a receiver MAY check (spec 3.3.2.3.2, reason
// code 0x99); bifrost leaves the payload as it came (docs/conformance.md, MQTT-3.3.2-4).
func (p *Publish) Decode(h Header, body []byte, v Version) error {
	p.RawProps = nil
	p.Dup = h.Flags&0x08 != 0
	p.QoS = h.Flags >> 1 & 3
	p.Retain = h.Flags&0x01 != 0
	r := cursor{b: body}
	var err error
	if p.Topic, err = r.str(); err != nil {
		return err
	}
	if p.QoS > 0 {
		if p.PacketID, err = r.u16(); err != nil {
			return err
		}
		if p.PacketID == 0 {
			return errPacketIDZero
		}
	} else {
		p.PacketID = 0
	}
	if v == V5 {
		if err := p.Props.decode(&r, PUBLISH); err != nil {
			return err
		}
	} else {
		p.Props.Reset()
	}
	if len(p.Topic) == 0 {
		if !p.Props.TopicAlias.Set {
			return errTopicAlias // 3.1.1: [MQTT-4.7.3-1]
		}
	} else if err := ValidTopicName(p.Topic); err != nil {
		return err
	}
	p.Payload = r.rest()
	return nil
}

// CheckFromClient checks what only the client-to-server direction forbids; a server calls
// it after Decode, which accepts a PUBLISH as either side may receive it. Subscription
// identifiers are the server's to add, for the subscriptions a message matched: a
// client's PUBLISH carrying one is a protocol error [MQTT-3.3.4-6].
func (p *Publish) CheckFromClient() error {
	if len(p.Props.SubscriptionIDs) > 0 {
		return errClientSubID
	}
	return nil
}

func (p *Publish) headSize(v Version) int {
	n := 2 + len(p.Topic)
	if p.QoS > 0 {
		n += 2
	}
	if v == V5 {
		pn := p.Props.size(PUBLISH) + len(p.RawProps)
		n += uvarintLen(uint32(pn)) + pn
	}
	return n
}

// Size implements Packet.
func (p *Publish) Size(v Version) int {
	n := p.headSize(v) + len(p.Payload)
	return headerLen(n) + n
}

// AppendTo implements Packet.
func (p *Publish) AppendTo(dst []byte, v Version) []byte {
	return append(p.AppendHead(dst, v), p.Payload...)
}

// AppendHead appends everything but the payload, with a remaining length that counts the
// payload: a head that a writer could send before a payload it shares with other
// packets. The broker does not yet (each subscriber's pending buffer gets the whole
// packet: AppendTo).
func (p *Publish) AppendHead(dst []byte, v Version) []byte {
	first := byte(PUBLISH)<<4 | p.QoS<<1
	if p.Dup {
		first |= 0x08
	}
	if p.Retain {
		first |= 0x01
	}
	dst = appendHeader(dst, first, p.headSize(v)+len(p.Payload))
	dst = appendBin(dst, p.Topic)
	if p.QoS > 0 {
		dst = appendU16(dst, p.PacketID)
	}
	if v == V5 {
		dst = appendUvarint(dst, uint32(p.Props.size(PUBLISH)+len(p.RawProps)))
		dst = append(p.Props.AppendRaw(dst, PUBLISH), p.RawProps...)
	}
	return dst
}
