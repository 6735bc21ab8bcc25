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
