package packet

// Connack is the CONNACK packet (spec 3.2). Code is a 5.0 reason code; for 3.1 and 3.1.1
// it is mapped to and from the return codes (ConnackCodeV3).
type Connack struct {
	SessionPresent bool
	Code           ReasonCode
	Props          Properties
}

var (
	errConnackFlags = malformed("MQTT-3.2.2-1", "CONNACK reserved flags set")
	errConnackCode  = malformed("MQTT-3.2.2-8", "CONNACK reason code not allowed")
)

// Type implements Packet.
func (*Connack) Type() Type { return CONNACK }

// Decode implements Packet.
func (c *Connack) Decode(h Header, body []byte, v Version) error {
	c.Props.Reset()
	r := cursor{b: body}
	f, err := r.u8()
	if err != nil {
		return err
	}
	if f&^1 != 0 {
		return errConnackFlags
	}
	c.SessionPresent = f&1 != 0 && v != V31 // 3.1 has no session present flag
	code, err := r.u8()
	if err != nil {
		return err
	}
	if v == V5 {
		c.Code = ReasonCode(code)
		if !c.Code.validFor(CONNACK) {
			return errConnackCode
		}
		if err := c.Props.decode(&r, CONNACK); err != nil {
			return err
		}
	} else {
		if code > ConnRefusedNotAuthorized {
			return errConnackCode
		}
		c.Code = reasonFromV3(code)
	}
	return r.end()
}

func (c *Connack) bodySize(v Version) int {
	if v == V5 {
		return 2 + c.Props.sectionSize(CONNACK)
	}
	return 2
}

// Size implements Packet.
func (c *Connack) Size(v Version) int { n := c.bodySize(v); return headerLen(n) + n }

// AppendTo implements Packet.
func (c *Connack) AppendTo(dst []byte, v Version) []byte {
	dst = appendHeader(dst, byte(CONNACK)<<4, c.bodySize(v))
	var f byte
	if c.SessionPresent && v != V31 { // 3.1 has no session present flag
		f = 1
	}
	if v != V5 {
		return append(dst, f, ConnackCodeV3(c.Code))
	}
	return c.Props.appendTo(append(dst, f, byte(c.Code)), CONNACK)
}

// Fit removes properties of a 5.0 CONNACK that the client can do without until the packet
// is at most max bytes, the client's Maximum Packet Size, which the server must not exceed
// [MQTT-3.1.2-24]; it reports whether the packet fits (max 0: no limit). It removes, in
// this order, and only as far as needed:
//
//  1. the properties that state their default, which their absence means as well:
//     Receive Maximum 65,535, Topic Alias Maximum 0, Maximum QoS 2, and Retain, Wildcard
//     Subscription, Subscription Identifier and Shared Subscription Available 1;
//  2. the Reason String [MQTT-3.2.2-19] and the User Properties [MQTT-3.2.2-20];
//  3. Response Information and Server Reference, which a server may always leave out.
//
// The rest cannot go without the client getting it wrong: an assigned client identifier,
// a keep alive or session expiry other than its own, limits it must keep (a smaller
// Receive Maximum or Maximum Packet Size, aliases, QoS, retain), authentication. A CONNACK
// that still does not fit cannot be sent.
func (c *Connack) Fit(max uint32) bool {
	fits := func() bool { return max == 0 || uint32(c.Size(V5)) <= max }
	if fits() {
		return true
	}
	p := &c.Props
	dropIf(&p.ReceiveMaximum, 65535)
	dropIf(&p.TopicAliasMaximum, 0)
	dropIf(&p.MaximumQoS, 2)
	dropIf(&p.RetainAvailable, 1)
	dropIf(&p.WildcardSubAvailable, 1)
	dropIf(&p.SubIDAvailable, 1)
	dropIf(&p.SharedSubAvailable, 1)
	if fits() {
		return true
	}
	if p.ReasonString = nil; fits() {
		return true
	}
	if p.User = nil; fits() {
		return true
	}
	if p.ResponseInfo = nil; fits() {
		return true
	}
	p.ServerReference = nil
	return fits()
}

// dropIf makes o absent if it is present with the value its absence means.
func dropIf[T uint8 | uint16 | uint32](o *Opt[T], absent T) {
	if o.Set && o.V == absent {
		*o = Opt[T]{}
	}
}
