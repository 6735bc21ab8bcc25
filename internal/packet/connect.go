package packet

// Connect is the CONNECT packet (spec 3.1), the first packet of every connection.
type Connect struct {
	// ProtocolName is "MQTT" (3.1.1, 5.0) or "MQIsdp" (3.1). Encoding derives it from the
	// version; decoding keeps what the client sent.
	ProtocolName []byte
	Version      Version
	// Bridge is the Mosquitto bridge marker: a 3.1 or 3.1.1 protocol level with its 0x80
	// bit set (Mosquitto's try_private), telling the server the client is a bridge, whose
	// subscriptions must not echo its own messages and must keep their retain flag. 5.0
	// bridges use No Local and Retain As Published instead, and have no marker.
	Bridge     bool
	CleanStart bool // "clean session" before 5.0
	KeepAlive  uint16
	Props      Properties
	ClientID   []byte

	WillFlag    bool
	WillQoS     byte
	WillRetain  bool
	WillProps   Properties
	WillTopic   []byte
	WillPayload []byte

	UsernameFlag bool
	Username     []byte
	PasswordFlag bool
	Password     []byte
}

var (
	errProtocolVersion = &Error{UnsupportedProtocolVersion, "MQTT-3.1.2-2", "unsupported protocol name or level"}
	errConnectReserved = malformed("MQTT-3.1.2-3", "CONNECT reserved flag set")
	errWillFlags       = malformed("MQTT-3.1.2-11", "will QoS or will retain set without a will")
	errWillQoS         = malformed("MQTT-3.1.2-12", "will QoS 3")
	errPasswordFlag    = malformed("MQTT-3.1.2-22", "password without a user name")
	errWillTopic       = malformed("MQTT-3.1.3-11", "will topic is not a valid topic name")
)

// Type implements Packet.
func (*Connect) Type() Type { return CONNECT }

// Decode decodes a CONNECT. The version comes from the packet itself; v is ignored. On an
// unsupported protocol name or level the returned error carries UnsupportedProtocolVersion
// and c.Version holds the level the client asked for, so the server can answer with a
// CONNACK the client understands [MQTT-3.1.2-2].
func (c *Connect) Decode(h Header, body []byte, _ Version) error {
	props, wprops := c.Props, c.WillProps
	*c = Connect{}
	c.Props, c.WillProps = props, wprops
	c.Props.Reset()
	c.WillProps.Reset()

	r := cursor{b: body}
	name, err := r.str()
	if err != nil {
		return err
	}
	c.ProtocolName = name
	level, err := r.u8()
	if err != nil {
		return err
	}
	if level&0x80 != 0 && level&^0x80 != byte(V5) {
		c.Bridge, level = true, level&^0x80
	}
	c.Version = Version(level)
	switch {
	case string(name) == "MQTT" && (c.Version == V311 || c.Version == V5):
	case string(name) == "MQIsdp" && c.Version == V31:
	default:
		return errProtocolVersion
	}
	flags, err := r.u8()
	if err != nil {
		return err
	}
	if flags&0x01 != 0 {
		return errConnectReserved
	}
	c.CleanStart = flags&0x02 != 0
	c.WillFlag = flags&0x04 != 0
	c.WillQoS = flags >> 3 & 3
	c.WillRetain = flags&0x20 != 0
	c.PasswordFlag = flags&0x40 != 0
	c.UsernameFlag = flags&0x80 != 0
	if !c.WillFlag && (c.WillQoS != 0 || c.WillRetain) {
		return errWillFlags // also [MQTT-3.1.2-13], [MQTT-3.1.2-15]
	}
	if c.WillQoS == 3 {
		return errWillQoS
	}
	if c.PasswordFlag && !c.UsernameFlag && c.Version != V5 {
		return errPasswordFlag // 5.0 allows a password alone
	}
	if c.KeepAlive, err = r.u16(); err != nil {
		return err
	}
	if c.Version == V5 {
		if err := c.Props.decode(&r, CONNECT); err != nil {
			return err
		}
	}
	if c.ClientID, err = r.str(); err != nil { // [MQTT-3.1.3-4]
		return err
	}
	if c.WillFlag {
		if c.Version == V5 {
			if err := c.WillProps.decode(&r, willKind); err != nil {
				return err
			}
		}
		if c.WillTopic, err = r.str(); err != nil {
			return err
		}
		if ValidTopicName(c.WillTopic) != nil {
			return errWillTopic
		}
		if c.WillPayload, err = r.bin(); err != nil {
			return err
		}
	}
	if c.UsernameFlag {
		if c.Username, err = r.str(); err != nil { // [MQTT-3.1.3-11]
			return err
		}
	}
	if c.PasswordFlag {
		if c.Password, err = r.bin(); err != nil {
			return err
		}
	}
	return r.end()
}

func protocolName(v Version) string {
	if v == V31 {
		return "MQIsdp"
	}
	return "MQTT"
}

func (c *Connect) flags() byte {
	var f byte
	if c.CleanStart {
		f |= 0x02
	}
	if c.WillFlag {
		f |= 0x04 | c.WillQoS<<3
		if c.WillRetain {
			f |= 0x20
		}
	}
	if c.PasswordFlag {
		f |= 0x40
	}
	if c.UsernameFlag {
		f |= 0x80
	}
	return f
}

func (c *Connect) bodySize(v Version) int {
	n := 2 + len(protocolName(v)) + 1 + 1 + 2 + 2 + len(c.ClientID)
	if v == V5 {
		n += c.Props.sectionSize(CONNECT)
	}
	if c.WillFlag {
		if v == V5 {
			n += c.WillProps.sectionSize(willKind)
		}
		n += 4 + len(c.WillTopic) + len(c.WillPayload)
	}
	if c.UsernameFlag {
		n += 2 + len(c.Username)
	}
	if c.PasswordFlag {
		n += 2 + len(c.Password)
	}
	return n
}

// Size implements Packet. The version written is c.Version; v is used when that is unset.
func (c *Connect) Size(v Version) int {
	v = c.version(v)
	n := c.bodySize(v)
	return headerLen(n) + n
}

func (c *Connect) version(v Version) Version {
	if c.Version != 0 {
		return c.Version
	}
	return v
}

// AppendTo implements Packet.
func (c *Connect) AppendTo(dst []byte, v Version) []byte {
	v = c.version(v)
	dst = appendHeader(dst, byte(CONNECT)<<4, c.bodySize(v))
	dst = appendStr(dst, protocolName(v))
	level := byte(v)
	if c.Bridge && v != V5 {
		level |= 0x80
	}
	dst = append(dst, level, c.flags())
	dst = appendU16(dst, c.KeepAlive)
	if v == V5 {
		dst = c.Props.appendTo(dst, CONNECT)
	}
	dst = appendBin(dst, c.ClientID)
	if c.WillFlag {
		if v == V5 {
			dst = c.WillProps.appendTo(dst, willKind)
		}
		dst = appendBin(appendBin(dst, c.WillTopic), c.WillPayload)
	}
	if c.UsernameFlag {
		dst = appendBin(dst, c.Username)
	}
	if c.PasswordFlag {
		dst = appendBin(dst, c.Password)
	}
	return dst
}
