package packet

// Pingreq is the PINGREQ packet (spec 3.12).
type Pingreq struct{}

// Pingresp is the PINGRESP packet (spec 3.13).
type Pingresp struct{}

var errPingBody = malformed("MQTT-3.12", "PINGREQ or PINGRESP with a body")

// Type implements Packet.
func (Pingreq) Type() Type { return PINGREQ }

// Decode implements Packet.
func (Pingreq) Decode(_ Header, body []byte, _ Version) error { return emptyBody(body) }

// Size implements Packet.
func (Pingreq) Size(Version) int { return 2 }

// AppendTo implements Packet.
func (Pingreq) AppendTo(dst []byte, _ Version) []byte { return append(dst, byte(PINGREQ)<<4, 0) }

// Type implements Packet.
func (Pingresp) Type() Type { return PINGRESP }

// Decode implements Packet.
func (Pingresp) Decode(_ Header, body []byte, _ Version) error { return emptyBody(body) }

// Size implements Packet.
func (Pingresp) Size(Version) int { return 2 }

// AppendTo implements Packet.
func (Pingresp) AppendTo(dst []byte, _ Version) []byte {
	return append(dst, byte(PINGRESP)<<4, 0)
}

func emptyBody(body []byte) error {
	if len(body) != 0 {
		return errPingBody
	}
	return nil
}

// Disconnect is the DISCONNECT packet (spec 3.14). Before 5.0 it has no body.
type Disconnect struct {
	Code  ReasonCode
	Props Properties
}

var (
	errDisconnectBody = malformed("MQTT-3.14.1-1", "DISCONNECT with a body before MQTT 5.0")
	errDisconnectCode = malformed("MQTT-3.14.2-1", "DISCONNECT reason code not allowed")
)

// Type implements Packet.
func (*Disconnect) Type() Type { return DISCONNECT }

// Decode implements Packet.
func (d *Disconnect) Decode(_ Header, body []byte, v Version) error {
	d.Code = NormalDisconnection
	d.Props.Reset()
	if v != V5 {
		if len(body) != 0 {
			return errDisconnectBody
		}
		return nil
	}
	return decodeCodeAndProps(body, DISCONNECT, &d.Code, &d.Props, errDisconnectCode)
}

// Size implements Packet.
func (d *Disconnect) Size(v Version) int {
	n := codeAndPropsSize(v, d.Code, &d.Props, DISCONNECT)
	return headerLen(n) + n
}

// AppendTo implements Packet.
func (d *Disconnect) AppendTo(dst []byte, v Version) []byte {
	return appendCodeAndProps(dst, v, DISCONNECT, d.Code, &d.Props)
}

// Auth is the AUTH packet of MQTT 5.0 enhanced authentication (spec 3.15).
type Auth struct {
	Code  ReasonCode
	Props Properties
}

var errAuthCode = malformed("MQTT-3.15.2-1", "AUTH reason code not allowed")

// Type implements Packet.
func (*Auth) Type() Type { return AUTH }

// Decode implements Packet.
func (a *Auth) Decode(_ Header, body []byte, _ Version) error {
	a.Code = Success
	a.Props.Reset()
	return decodeCodeAndProps(body, AUTH, &a.Code, &a.Props, errAuthCode)
}

// Size implements Packet.
func (a *Auth) Size(Version) int {
	n := codeAndPropsSize(V5, a.Code, &a.Props, AUTH)
	return headerLen(n) + n
}

// AppendTo implements Packet.
func (a *Auth) AppendTo(dst []byte, _ Version) []byte {
	return appendCodeAndProps(dst, V5, AUTH, a.Code, &a.Props)
}

// decodeCodeAndProps reads the body shared by DISCONNECT and AUTH in 5.0: an optional
// reason code (absent: 0x00) and optional properties (spec 3.14.2.1, 3.15.2.1).
func decodeCodeAndProps(body []byte, t Type, code *ReasonCode, props *Properties, bad error) error {
	if len(body) == 0 {
		return nil
	}
	*code = ReasonCode(body[0])
	if !code.validFor(t) {
		return bad
	}
	if len(body) == 1 {
		return nil
	}
	r := cursor{b: body, i: 1}
	if err := props.decode(&r, t); err != nil {
		return err
	}
	return r.end()
}

// codeAndPropsSize is the body length, omitting the parts a sender may omit.
func codeAndPropsSize(v Version, code ReasonCode, props *Properties, t Type) int {
	if v != V5 {
		return 0
	}
	if pn := props.size(t); pn > 0 {
		return 1 + uvarintLen(uint32(pn)) + pn
	}
	if code != Success {
		return 1
	}
	return 0
}

func appendCodeAndProps(dst []byte, v Version, t Type, code ReasonCode, props *Properties) []byte {
	n := codeAndPropsSize(v, code, props, t)
	dst = appendHeader(dst, byte(t)<<4, n)
	if n > 0 {
		dst = append(dst, byte(code))
	}
	if n > 1 {
		dst = props.appendTo(dst, t)
	}
	return dst
}
