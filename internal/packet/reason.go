package packet

import "strconv"

// ReasonCode is an MQTT 5.0 reason code. It is an error so that errors carrying one can be
// matched with errors.As and the right CONNACK, DISCONNECT or ack code chosen from it.
// Codes below 0x80 report success; MQTT 3.1.1 return codes are mapped from these (see
// ConnackCodeV3).
type ReasonCode byte

// The MQTT 5.0 reason codes (spec 2.4, table 2-6). Wire values: append-only. Several names
// share a value because the spec names 0x00 by the packet it appears in.
const (
	Success                             ReasonCode = 0x00
	NormalDisconnection                 ReasonCode = 0x00
	GrantedQoS0                         ReasonCode = 0x00
	GrantedQoS1                         ReasonCode = 0x01
	GrantedQoS2                         ReasonCode = 0x02
	DisconnectWithWillMessage           ReasonCode = 0x04
	NoMatchingSubscribers               ReasonCode = 0x10
	NoSubscriptionExisted               ReasonCode = 0x11
	ContinueAuthentication              ReasonCode = 0x18
	ReAuthenticate                      ReasonCode = 0x19
	UnspecifiedError                    ReasonCode = 0x80
	MalformedPacket                     ReasonCode = 0x81
	ProtocolError                       ReasonCode = 0x82
	ImplementationSpecificError         ReasonCode = 0x83
	UnsupportedProtocolVersion          ReasonCode = 0x84
	ClientIdentifierNotValid            ReasonCode = 0x85
	BadUserNameOrPassword               ReasonCode = 0x86
	NotAuthorized                       ReasonCode = 0x87
	ServerUnavailable                   ReasonCode = 0x88
	ServerBusy                          ReasonCode = 0x89
	Banned                              ReasonCode = 0x8A
	ServerShuttingDown                  ReasonCode = 0x8B
	BadAuthenticationMethod             ReasonCode = 0x8C
	KeepAliveTimeout                    ReasonCode = 0x8D
	SessionTakenOver                    ReasonCode = 0x8E
	TopicFilterInvalid                  ReasonCode = 0x8F
	TopicNameInvalid                    ReasonCode = 0x90
	PacketIdentifierInUse               ReasonCode = 0x91
	PacketIdentifierNotFound            ReasonCode = 0x92
	ReceiveMaximumExceeded              ReasonCode = 0x93
	TopicAliasInvalid                   ReasonCode = 0x94
	PacketTooLarge                      ReasonCode = 0x95
	MessageRateTooHigh                  ReasonCode = 0x96
	QuotaExceeded                       ReasonCode = 0x97
	AdministrativeAction                ReasonCode = 0x98
	PayloadFormatInvalid                ReasonCode = 0x99
	RetainNotSupported                  ReasonCode = 0x9A
	QoSNotSupported                     ReasonCode = 0x9B
	UseAnotherServer                    ReasonCode = 0x9C
	ServerMoved                         ReasonCode = 0x9D
	SharedSubscriptionsNotSupported     ReasonCode = 0x9E
	ConnectionRateExceeded              ReasonCode = 0x9F
	MaximumConnectTime                  ReasonCode = 0xA0
	SubscriptionIdentifiersNotSupported ReasonCode = 0xA1
	WildcardSubscriptionsNotSupported   ReasonCode = 0xA2
)

var reasonNames = map[ReasonCode]string{
	0x00: "success", 0x01: "granted QoS 1", 0x02: "granted QoS 2",
	0x04: "disconnect with will message", 0x10: "no matching subscribers",
	0x11: "no subscription existed", 0x18: "continue authentication", 0x19: "re-authenticate",
	0x80: "unspecified error", 0x81: "malformed packet", 0x82: "protocol error",
	0x83: "implementation specific error", 0x84: "unsupported protocol version",
	0x85: "client identifier not valid", 0x86: "bad user name or password",
	0x87: "not authorized", 0x88: "server unavailable", 0x89: "server busy", 0x8A: "banned",
	0x8B: "server shutting down", 0x8C: "bad authentication method",
	0x8D: "keep alive timeout", 0x8E: "session taken over", 0x8F: "topic filter invalid",
	0x90: "topic name invalid", 0x91: "packet identifier in use",
	0x92: "packet identifier not found", 0x93: "receive maximum exceeded",
	0x94: "topic alias invalid", 0x95: "packet too large", 0x96: "message rate too high",
	0x97: "quota exceeded", 0x98: "administrative action", 0x99: "payload format invalid",
	0x9A: "retain not supported", 0x9B: "QoS not supported", 0x9C: "use another server",
	0x9D: "server moved", 0x9E: "shared subscriptions not supported",
	0x9F: "connection rate exceeded", 0xA0: "maximum connect time",
	0xA1: "subscription identifiers not supported",
	0xA2: "wildcard subscriptions not supported",
}

// String names the code in the spec's words.
func (c ReasonCode) String() string {
	if s, ok := reasonNames[c]; ok {
		return s
	}
	return "reason code 0x" + strconv.FormatUint(uint64(c), 16)
}

// Error makes a ReasonCode an error value.
func (c ReasonCode) Error() string { return "mqtt: " + c.String() }

// IsError reports whether the code reports a failure (0x80 and above).
func (c ReasonCode) IsError() bool { return c >= 0x80 }

// Valid reports whether c is a reason code that the spec defines.
func (c ReasonCode) Valid() bool { _, ok := reasonNames[c]; return ok }

// validFor reports whether the spec allows code c in a packet of type t (spec 2.4).
func (c ReasonCode) validFor(t Type) bool {
	switch t {
	case CONNACK:
		return connackCodes[c]
	case PUBACK, PUBREC:
		return c == Success || c == NoMatchingSubscribers || c == UnspecifiedError ||
			c == ImplementationSpecificError || c == NotAuthorized || c == TopicNameInvalid ||
			c == PacketIdentifierInUse || c == QuotaExceeded || c == PayloadFormatInvalid
	case PUBREL, PUBCOMP:
		return c == Success || c == PacketIdentifierNotFound
	case SUBACK:
		return c <= GrantedQoS2 || c == UnspecifiedError || c == ImplementationSpecificError ||
			c == NotAuthorized || c == TopicFilterInvalid || c == PacketIdentifierInUse ||
			c == QuotaExceeded || c == SharedSubscriptionsNotSupported ||
			c == SubscriptionIdentifiersNotSupported || c == WildcardSubscriptionsNotSupported
	case UNSUBACK:
		return c == Success || c == NoSubscriptionExisted || c == UnspecifiedError ||
			c == ImplementationSpecificError || c == NotAuthorized ||
			c == TopicFilterInvalid || c == PacketIdentifierInUse
	case DISCONNECT:
		return disconnectCodes[c]
	case AUTH:
		return c == Success || c == ContinueAuthentication || c == ReAuthenticate
	}
	return false
}

var connackCodes = [256]bool{
	0x00: true, 0x80: true, 0x81: true, 0x82: true, 0x83: true, 0x84: true, 0x85: true,
	0x86: true, 0x87: true, 0x88: true, 0x89: true, 0x8A: true, 0x8C: true, 0x90: true,
	0x95: true, 0x97: true, 0x99: true, 0x9A: true, 0x9B: true, 0x9C: true, 0x9D: true,
	0x9F: true,
}

var disconnectCodes = [256]bool{
	0x00: true, 0x04: true, 0x80: true, 0x81: true, 0x82: true, 0x83: true, 0x87: true,
	0x89: true, 0x8B: true, 0x8D: true, 0x8E: true, 0x8F: true, 0x90: true, 0x93: true,
	0x94: true, 0x95: true, 0x96: true, 0x97: true, 0x98: true, 0x99: true, 0x9A: true,
	0x9B: true, 0x9C: true, 0x9D: true, 0x9E: true, 0x9F: true, 0xA0: true, 0xA1: true,
	0xA2: true,
}

// MQTT 3.1.1 CONNACK return codes (spec 3.2.2.3). Wire values: append-only.
const (
	ConnAccepted                     byte = 0x00
	ConnRefusedProtocolVersion       byte = 0x01
	ConnRefusedIdentifierRejected    byte = 0x02
	ConnRefusedServerUnavailable     byte = 0x03
	ConnRefusedBadUserNameOrPassword byte = 0x04
	ConnRefusedNotAuthorized         byte = 0x05
)

// ConnackCodeV3 maps a 5.0 reason code to the closest MQTT 3.1/3.1.1 CONNACK return code,
// so one decision in the session answers clients of every version.
func ConnackCodeV3(c ReasonCode) byte {
	switch c {
	case Success:
		return ConnAccepted
	case UnsupportedProtocolVersion:
		return ConnRefusedProtocolVersion
	case ClientIdentifierNotValid:
		return ConnRefusedIdentifierRejected
	case BadUserNameOrPassword, BadAuthenticationMethod:
		return ConnRefusedBadUserNameOrPassword
	case NotAuthorized, Banned:
		return ConnRefusedNotAuthorized
	}
	return ConnRefusedServerUnavailable
}

// reasonFromV3 maps an MQTT 3.1.1 CONNACK return code back to a reason code.
func reasonFromV3(b byte) ReasonCode {
	switch b {
	case ConnAccepted:
		return Success
	case ConnRefusedProtocolVersion:
		return UnsupportedProtocolVersion
	case ConnRefusedIdentifierRejected:
		return ClientIdentifierNotValid
	case ConnRefusedServerUnavailable:
		return ServerUnavailable
	case ConnRefusedBadUserNameOrPassword:
		return BadUserNameOrPassword
	case ConnRefusedNotAuthorized:
		return NotAuthorized
	}
	return ReasonCode(b)
}

// Error is a violation of the protocol found while decoding: the reason code the spec
// prescribes for it, the spec rule it breaks and a short description. Errors are package
// variables, so reporting one allocates nothing. It unwraps to its ReasonCode:
//
//	var rc packet.ReasonCode
//	if errors.As(err, &rc) { /* answer with rc */ }
type Error struct {
	Code ReasonCode
	Rule string // spec id such as "MQTT-3.3.2-2", empty where the spec gives none
	Text string
}

func (e *Error) Error() string {
	if e.Rule == "" {
		return "packet: " + e.Text + " (" + e.Code.String() + ")"
	}
	return "packet: " + e.Text + " [" + e.Rule + "] (" + e.Code.String() + ")"
}

// Unwrap returns the reason code, for errors.As and errors.Is.
func (e *Error) Unwrap() error { return e.Code }

func malformed(rule, text string) *Error { return &Error{MalformedPacket, rule, text} }
func protocolErr(rule, text string) *Error {
	return &Error{ProtocolError, rule, text}
}
