package packet_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
	p5 "github.com/eclipse/paho.golang/packets"
	p3 "github.com/eclipse/paho.mqtt.golang/packets"
)

// This file cross-checks the codec against two independent implementations: Eclipse
// paho.mqtt.golang (3.1 and 3.1.1) and paho.golang (5.0). A case holds one packet twice,
// as our struct and as paho's, both written out by hand, and runs three ways:
//
//   - paho-to-bifrost: paho encodes its struct; we decode the bytes and must get ours.
//   - bifrost-to-paho: we encode ours; paho decodes the bytes and must get its struct.
//   - bytes: the two encodings must be identical, unless the case says why the spec lets
//     them differ; then each codec must decode both encodings to the same packet.

// A pahoCase is one packet for both codecs.
type pahoCase struct {
	name string
	v    packet.Version
	ours packet.Packet    // the packet as our struct
	p3   p3.ControlPacket // the same packet for paho.mqtt.golang (3.1, 3.1.1)
	p5   p5.Packet        // the same packet for paho.golang (5.0)

	// differ says why paho's bytes legitimately differ from ours.
	differ string

	// lossy says what paho cannot carry, by its API or its encoder. oursFromPaho is then
	// what we must decode from paho's encoding of p5, and pahoFromOurs what paho must
	// decode from ours (nil: ours or p5 as usual). The bytes are not compared: the two
	// encodings carry different packets.
	lossy        string
	oursFromPaho packet.Packet
	pahoFromOurs p5.Packet

	// pahoCannotDecode says why paho fails to decode our encoding, which is valid.
	pahoCannotDecode string
}

func TestPaho(t *testing.T) {
	for _, tc := range pahoCases() {
		t.Run(tc.name, func(t *testing.T) {
			ours := tc.ours.AppendTo(nil, tc.v)
			if n := tc.ours.Size(tc.v); n != len(ours) {
				t.Fatalf("Size = %d, AppendTo wrote %d bytes", n, len(ours))
			}
			theirs, err := pahoEncode(tc)
			if err != nil {
				t.Fatalf("paho encode: %v", err)
			}

			t.Run("paho-to-bifrost", func(t *testing.T) {
				got, err := decodeOurs(theirs, tc.v)
				if err != nil {
					t.Fatalf("decoding paho's % x: %v", theirs, err)
				}
				want := tc.ours
				if tc.oursFromPaho != nil {
					want = tc.oursFromPaho
				}
				if d := diff(got, want, true); d != "" {
					t.Errorf("decoding paho's % x: %s", theirs, d)
				}
			})

			t.Run("bifrost-to-paho", func(t *testing.T) {
				got, err := decodePaho(ours, tc.v)
				if tc.pahoCannotDecode != "" {
					if err == nil {
						t.Fatalf("paho now decodes % x; drop the note %q", ours, tc.pahoCannotDecode)
					}
					t.Logf("paho fails on % x as expected (%v): %s", ours, err, tc.pahoCannotDecode)
					return
				}
				if err != nil {
					t.Fatalf("paho decoding % x: %v", ours, err)
				}
				var want any = tc.p3
				if tc.v == packet.V5 {
					want = tc.p5
					if tc.pahoFromOurs != nil {
						want = tc.pahoFromOurs
					}
				}
				if d := diff(got, want, false); d != "" {
					t.Errorf("paho decoding % x: %s", ours, d)
				}
			})

			if tc.lossy != "" {
				return
			}
			t.Run("bytes", func(t *testing.T) {
				if tc.differ == "" {
					if !bytes.Equal(ours, theirs) {
						t.Errorf("encodings differ\nours % x\npaho % x", ours, theirs)
					}
					return
				}
				if bytes.Equal(ours, theirs) {
					t.Fatalf("encodings are now identical (% x); drop the note %q", ours, tc.differ)
				}
				// Compare by decoding: each codec must read both encodings alike.
				a, errA := decodeOurs(ours, tc.v)
				b, errB := decodeOurs(theirs, tc.v)
				if errA != nil || errB != nil {
					t.Fatalf("decoding: ours: %v, paho's: %v", errA, errB)
				}
				if d := diff(b, a, true); d != "" {
					t.Errorf("we decode paho's % x and our % x differently: %s", theirs, ours, d)
				}
				if tc.pahoCannotDecode != "" {
					return
				}
				pa, errA := decodePaho(ours, tc.v)
				pb, errB := decodePaho(theirs, tc.v)
				if errA != nil || errB != nil {
					t.Fatalf("paho decoding: ours: %v, paho's: %v", errA, errB)
				}
				if d := diff(pb, pa, false); d != "" {
					t.Errorf("paho decodes its % x and our % x differently: %s", theirs, ours, d)
				}
			})
		})
	}
}

// TestPahoConnectVersion encodes a CONNECT that leaves Version unset, so that the version
// argument of AppendTo applies, and has paho check the protocol name and level.
func TestPahoConnectVersion(t *testing.T) {
	for _, tc := range []struct {
		v    packet.Version
		name string
	}{
		{packet.V31, "MQIsdp"},
		{packet.V311, "MQTT"},
		{packet.V5, "MQTT"},
	} {
		t.Run(tc.v.String(), func(t *testing.T) {
			c := &packet.Connect{CleanStart: true, KeepAlive: 30, ClientID: str("c")}
			b := c.AppendTo(nil, tc.v)
			got, err := decodePaho(b, tc.v)
			if err != nil {
				t.Fatalf("paho decoding % x: %v", b, err)
			}
			var name string
			var level byte
			switch p := got.(type) {
			case *p3.ConnectPacket:
				if rc := p.Validate(); rc != p3.Accepted {
					t.Errorf("paho refuses % x: %s", b, p3.ConnackReturnCodes[rc])
				}
				name, level = p.ProtocolName, p.ProtocolVersion
			case *p5.Connect:
				name, level = p.ProtocolName, p.ProtocolVersion
			}
			if name != tc.name || level != byte(tc.v) {
				t.Errorf("wrote protocol %q level %d, want %q level %d", name, level, tc.name, tc.v)
			}
			if _, err := decodeOurs(b, tc.v); err != nil {
				t.Errorf("we refuse our own % x: %v", b, err)
			}
		})
	}
}

func str(s string) []byte { return []byte(s) }

// User properties with a repeated key and an empty value, for checking that order is kept.
var (
	oursUser = []packet.UserProperty{{str("k"), str("1")}, {str("region"), str("eu-west")},
		{str("k"), str("2")}, {str("empty"), str("")}}
	pahoUser = []p5.User{{Key: "k", Value: "1"}, {Key: "region", Value: "eu-west"},
		{Key: "k", Value: "2"}, {Key: "empty", Value: ""}}
)

// pahoCases returns the cases: the hand-written ones, then one per reason code for each
// 5.0 packet that carries one.
func pahoCases() []pahoCase {
	cases := []pahoCase{
		// MQTT 3.1 and 3.1.1 against paho.mqtt.golang.
		{name: "3.1/connect/minimal", v: packet.V31,
			ours: &packet.Connect{ProtocolName: str("MQIsdp"), Version: packet.V31, CleanStart: true,
				KeepAlive: 30, ClientID: str("legacy")},
			p3: &p3.ConnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connect},
				ProtocolName: "MQIsdp", ProtocolVersion: 3, CleanSession: true, Keepalive: 30,
				ClientIdentifier: "legacy"}},
		{name: "3.1.1/connect/minimal", v: packet.V311,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V311, CleanStart: true,
				KeepAlive: 60, ClientID: str("client-1")},
			p3: &p3.ConnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connect},
				ProtocolName: "MQTT", ProtocolVersion: 4, CleanSession: true, Keepalive: 60,
				ClientIdentifier: "client-1"}},
		{name: "3.1.1/connect/empty-client-id", v: packet.V311,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V311, CleanStart: true,
				ClientID: str("")},
			p3: &p3.ConnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connect},
				ProtocolName: "MQTT", ProtocolVersion: 4, CleanSession: true}},
		{name: "3.1.1/connect/will-qos1", v: packet.V311,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V311, KeepAlive: 15,
				ClientID: str("sensor-7"), WillFlag: true, WillQoS: 1, WillTopic: str("status/sensor-7"),
				WillPayload: str("offline")},
			p3: &p3.ConnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connect},
				ProtocolName: "MQTT", ProtocolVersion: 4, Keepalive: 15, ClientIdentifier: "sensor-7",
				WillFlag: true, WillQos: 1, WillTopic: "status/sensor-7", WillMessage: str("offline")}},
		{name: "3.1.1/connect/will-qos2-retain-user-password", v: packet.V311,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V311, CleanStart: true,
				KeepAlive: 0xffff, ClientID: str("c"), WillFlag: true, WillQoS: 2, WillRetain: true,
				WillTopic: str("a/b"), WillPayload: []byte{0, 1, 0xfe, 0xff},
				UsernameFlag: true, Username: str("user"), PasswordFlag: true, Password: []byte{0, 0xff, 'p'}},
			p3: &p3.ConnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connect},
				ProtocolName: "MQTT", ProtocolVersion: 4, CleanSession: true, Keepalive: 0xffff,
				ClientIdentifier: "c", WillFlag: true, WillQos: 2, WillRetain: true, WillTopic: "a/b",
				WillMessage: []byte{0, 1, 0xfe, 0xff}, UsernameFlag: true, Username: "user",
				PasswordFlag: true, Password: []byte{0, 0xff, 'p'}}},
		{name: "3.1.1/connect/user-only", v: packet.V311,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V311, CleanStart: true,
				ClientID: str("u1"), UsernameFlag: true, Username: str("bifröst")},
			p3: &p3.ConnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connect},
				ProtocolName: "MQTT", ProtocolVersion: 4, CleanSession: true, ClientIdentifier: "u1",
				UsernameFlag: true, Username: "bifröst"}},

		{name: "3.1.1/connack/accepted-session-present", v: packet.V311,
			ours: &packet.Connack{SessionPresent: true},
			p3:   &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack}, SessionPresent: true}},
		{name: "3.1.1/connack/accepted", v: packet.V311,
			ours: &packet.Connack{Code: packet.Success},
			p3:   &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack}, ReturnCode: p3.Accepted}},
		{name: "3.1.1/connack/refused-protocol-version", v: packet.V311,
			ours: &packet.Connack{Code: packet.UnsupportedProtocolVersion},
			p3: &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack},
				ReturnCode: p3.ErrRefusedBadProtocolVersion}},
		{name: "3.1.1/connack/refused-identifier", v: packet.V311,
			ours: &packet.Connack{Code: packet.ClientIdentifierNotValid},
			p3: &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack},
				ReturnCode: p3.ErrRefusedIDRejected}},
		{name: "3.1.1/connack/refused-server-unavailable", v: packet.V311,
			ours: &packet.Connack{Code: packet.ServerUnavailable},
			p3: &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack},
				ReturnCode: p3.ErrRefusedServerUnavailable}},
		{name: "3.1.1/connack/refused-bad-credentials", v: packet.V311,
			ours: &packet.Connack{Code: packet.BadUserNameOrPassword},
			p3: &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack},
				ReturnCode: p3.ErrRefusedBadUsernameOrPassword}},
		{name: "3.1.1/connack/refused-not-authorized", v: packet.V311,
			ours: &packet.Connack{Code: packet.NotAuthorized},
			p3: &p3.ConnackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Connack},
				ReturnCode: p3.ErrRefusedNotAuthorised}},

		{name: "3.1.1/publish/qos0", v: packet.V311,
			ours: &packet.Publish{Topic: str("a/b"), Payload: str("hello")},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish},
				TopicName: "a/b", Payload: str("hello")}},
		{name: "3.1.1/publish/qos0-retain-utf8-topic", v: packet.V311,
			ours: &packet.Publish{Topic: str("bifröst/ü/€"), Payload: str("1"), Retain: true},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish, Retain: true},
				TopicName: "bifröst/ü/€", Payload: str("1")}},
		{name: "3.1.1/publish/qos1", v: packet.V311,
			ours: &packet.Publish{Topic: str("t"), Payload: str("x"), QoS: 1, PacketID: 1},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish, Qos: 1},
				TopicName: "t", MessageID: 1, Payload: str("x")}},
		{name: "3.1.1/publish/qos1-dup-retain", v: packet.V311,
			ours: &packet.Publish{Topic: str("t/u"), Payload: str("again"), QoS: 1, PacketID: 0xffff,
				Dup: true, Retain: true},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish, Qos: 1, Dup: true,
				Retain: true}, TopicName: "t/u", MessageID: 0xffff, Payload: str("again")}},
		{name: "3.1.1/publish/qos2-binary", v: packet.V311,
			ours: &packet.Publish{Topic: str("bin"), Payload: []byte{0, 1, 2, 0xff}, QoS: 2,
				PacketID: 0x1234},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish, Qos: 2},
				TopicName: "bin", MessageID: 0x1234, Payload: []byte{0, 1, 2, 0xff}}},
		{name: "3.1.1/publish/qos2-dup-retain-empty-payload", v: packet.V311,
			ours: &packet.Publish{Topic: str("clear/me"), Payload: []byte{}, QoS: 2, PacketID: 9,
				Dup: true, Retain: true},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish, Qos: 2, Dup: true,
				Retain: true}, TopicName: "clear/me", MessageID: 9}},
		{name: "3.1.1/publish/qos1-large-payload", v: packet.V311,
			// A payload long enough for a 3-byte remaining length.
			ours: &packet.Publish{Topic: str("big"), Payload: bytes.Repeat(str("0123456789abcdef"), 1100),
				QoS: 1, PacketID: 2},
			p3: &p3.PublishPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Publish, Qos: 1},
				TopicName: "big", MessageID: 2, Payload: bytes.Repeat(str("0123456789abcdef"), 1100)}},

		{name: "3.1.1/puback", v: packet.V311,
			ours: &packet.Ack{PacketType: packet.PUBACK, PacketID: 1},
			p3:   &p3.PubackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Puback}, MessageID: 1}},
		{name: "3.1.1/pubrec", v: packet.V311,
			ours: &packet.Ack{PacketType: packet.PUBREC, PacketID: 0x1234},
			p3:   &p3.PubrecPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Pubrec}, MessageID: 0x1234}},
		{name: "3.1.1/pubrel", v: packet.V311,
			ours: &packet.Ack{PacketType: packet.PUBREL, PacketID: 0x1234},
			// PUBREL carries the fixed-header flags 0010, which paho models as QoS 1.
			p3: &p3.PubrelPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Pubrel, Qos: 1}, MessageID: 0x1234}},
		{name: "3.1.1/pubcomp", v: packet.V311,
			ours: &packet.Ack{PacketType: packet.PUBCOMP, PacketID: 0xffff},
			p3:   &p3.PubcompPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Pubcomp}, MessageID: 0xffff}},

		{name: "3.1.1/subscribe/several-filters", v: packet.V311,
			ours: &packet.Subscribe{PacketID: 10, Subscriptions: []packet.Subscription{
				{Filter: str("a/b"), QoS: 0}, {Filter: str("a/+/c"), QoS: 1}, {Filter: str("#"), QoS: 2},
				{Filter: str("$SYS/broker/+"), QoS: 1}}},
			p3: &p3.SubscribePacket{FixedHeader: p3.FixedHeader{MessageType: p3.Subscribe, Qos: 1},
				MessageID: 10, Topics: []string{"a/b", "a/+/c", "#", "$SYS/broker/+"},
				Qoss: []byte{0, 1, 2, 1}}},
		{name: "3.1.1/suback/granted-and-failure", v: packet.V311,
			ours: &packet.Suback{PacketID: 10, Codes: []packet.ReasonCode{packet.GrantedQoS0,
				packet.GrantedQoS1, packet.GrantedQoS2, packet.UnspecifiedError}},
			p3: &p3.SubackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Suback}, MessageID: 10,
				ReturnCodes: []byte{0, 1, 2, 0x80}}},
		{name: "3.1.1/unsubscribe/several-filters", v: packet.V311,
			ours: &packet.Unsubscribe{PacketID: 11, Filters: [][]byte{str("a/b"), str("a/+/c"), str("#")}},
			p3: &p3.UnsubscribePacket{FixedHeader: p3.FixedHeader{MessageType: p3.Unsubscribe, Qos: 1},
				MessageID: 11, Topics: []string{"a/b", "a/+/c", "#"}}},
		{name: "3.1.1/unsuback", v: packet.V311,
			ours: &packet.Unsuback{PacketID: 11},
			p3:   &p3.UnsubackPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Unsuback}, MessageID: 11}},
		{name: "3.1.1/pingreq", v: packet.V311,
			ours: &packet.Pingreq{},
			p3:   &p3.PingreqPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Pingreq}}},
		{name: "3.1.1/pingresp", v: packet.V311,
			ours: &packet.Pingresp{},
			p3:   &p3.PingrespPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Pingresp}}},
		{name: "3.1.1/disconnect", v: packet.V311,
			ours: &packet.Disconnect{},
			p3:   &p3.DisconnectPacket{FixedHeader: p3.FixedHeader{MessageType: p3.Disconnect}}},

		// MQTT 5.0 against paho.golang. Where paho writes properties in another order than
		// ours (by identifier), the properties are split over several cases whose subsets
		// both write in the same order, so that most properties are also compared as bytes.
		{name: "5.0/connect/minimal", v: packet.V5,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, CleanStart: true,
				KeepAlive: 30, ClientID: str("c5")},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, CleanStart: true, KeepAlive: 30,
				ClientID: "c5"}},
		{name: "5.0/connect/limits", v: packet.V5,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, ClientID: str("c5"),
				Props: packet.Properties{ReceiveMaximum: packet.Some[uint16](20),
					TopicAliasMaximum: packet.Some[uint16](10), MaximumPacketSize: packet.Some[uint32](1 << 20)}},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "c5",
				Properties: &p5.Properties{ReceiveMaximum: new(uint16(20)), TopicAliasMaximum: new(uint16(10)),
					MaximumPacketSize: new(uint32(1 << 20))}}},
		{name: "5.0/connect/request-info", v: packet.V5,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, ClientID: str("c5"),
				Props: packet.Properties{RequestProblemInfo: packet.Some[uint8](0),
					RequestResponseInfo: packet.Some[uint8](1)}},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "c5",
				Properties: &p5.Properties{RequestProblemInfo: new(byte(0)), RequestResponseInfo: new(byte(1))}}},
		{name: "5.0/connect/session-auth-user", v: packet.V5,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, ClientID: str("c5"),
				Props: packet.Properties{SessionExpiry: packet.Some[uint32](0xffffffff),
					AuthMethod: str("SCRAM-SHA-256"), AuthData: []byte{0, 1, 2, 0xff}, User: oursUser}},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "c5",
				Properties: &p5.Properties{SessionExpiryInterval: new(uint32(0xffffffff)),
					AuthMethod: "SCRAM-SHA-256", AuthData: []byte{0, 1, 2, 0xff}, User: pahoUser}}},
		{name: "5.0/connect/all-props", v: packet.V5,
			differ: "paho.golang writes CONNECT properties in its own order (receive maximum, topic " +
				"alias maximum, maximum packet size, request problem info, …), we by identifier; " +
				"spec 2.2.2.2 fixes no order",
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, KeepAlive: 45,
				ClientID: str("c5"), Props: packet.Properties{SessionExpiry: packet.Some[uint32](86400),
					ReceiveMaximum: packet.Some[uint16](100), MaximumPacketSize: packet.Some[uint32](packet.MaxPacketSize),
					TopicAliasMaximum: packet.Some[uint16](16), RequestResponseInfo: packet.Some[uint8](1),
					RequestProblemInfo: packet.Some[uint8](0), AuthMethod: str("SCRAM-SHA-256"),
					AuthData: []byte{1, 2, 3, 4}, User: oursUser}},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, KeepAlive: 45, ClientID: "c5",
				Properties: &p5.Properties{SessionExpiryInterval: new(uint32(86400)),
					ReceiveMaximum: new(uint16(100)), MaximumPacketSize: new(uint32(packet.MaxPacketSize)),
					TopicAliasMaximum: new(uint16(16)), RequestResponseInfo: new(byte(1)),
					RequestProblemInfo: new(byte(0)), AuthMethod: "SCRAM-SHA-256",
					AuthData: []byte{1, 2, 3, 4}, User: pahoUser}}},
		{name: "5.0/connect/will-delay-user-password", v: packet.V5,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, CleanStart: true,
				KeepAlive: 10, ClientID: str("c5"), WillFlag: true, WillQoS: 2, WillRetain: true,
				WillProps: packet.Properties{WillDelay: packet.Some[uint32](30), User: oursUser},
				WillTopic: str("will/c5"), WillPayload: str("gone"),
				UsernameFlag: true, Username: str("user"), PasswordFlag: true, Password: []byte{0, 'p', 0xff}},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, CleanStart: true, KeepAlive: 10,
				ClientID: "c5", WillFlag: true, WillQOS: 2, WillRetain: true, WillTopic: "will/c5",
				WillMessage: str("gone"), UsernameFlag: true, Username: "user", PasswordFlag: true,
				Password: []byte{0, 'p', 0xff}, WillProperties: &p5.Properties{
					WillDelayInterval: new(uint32(30)), User: pahoUser}}},
		{name: "5.0/connect/will-all-props", v: packet.V5,
			lossy: "paho.golang packs will properties with Pack(CONNECT), which writes payload " +
				"format, message expiry, content type, response topic and correlation data only " +
				"for PUBLISH: it silently drops them from the will (it decodes them fine)",
			ours: connectWith(packet.Properties{PayloadFormat: packet.Some[uint8](1),
				MessageExpiry: packet.Some[uint32](120), ContentType: str("text/plain"),
				ResponseTopic: str("replies/c5"), CorrelationData: []byte{0xca, 0xfe},
				WillDelay: packet.Some[uint32](5), User: oursUser}),
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "c5", WillFlag: true,
				WillQOS: 1, WillTopic: "will/c5", WillMessage: str("gone"),
				WillProperties: &p5.Properties{PayloadFormat: new(byte(1)), MessageExpiry: new(uint32(120)),
					ContentType: "text/plain", ResponseTopic: "replies/c5", CorrelationData: []byte{0xca, 0xfe},
					WillDelayInterval: new(uint32(5)), User: pahoUser}},
			oursFromPaho: connectWith(packet.Properties{WillDelay: packet.Some[uint32](5), User: oursUser})},
		{name: "5.0/connect/password-without-user", v: packet.V5,
			ours: &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, ClientID: str("c5"),
				PasswordFlag: true, Password: str("token")},
			p5: &p5.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "c5", PasswordFlag: true,
				Password: str("token")}},

		{name: "5.0/connack/session-present-limits", v: packet.V5,
			ours: &packet.Connack{SessionPresent: true, Props: packet.Properties{
				ReceiveMaximum: packet.Some[uint16](1), TopicAliasMaximum: packet.Some[uint16](0),
				MaximumPacketSize: packet.Some[uint32](4096)}},
			p5: &p5.Connack{SessionPresent: true, Properties: &p5.Properties{ReceiveMaximum: new(uint16(1)),
				TopicAliasMaximum: new(uint16(0)), MaximumPacketSize: new(uint32(4096))}}},
		{name: "5.0/connack/qos-retain", v: packet.V5,
			ours: &packet.Connack{Props: packet.Properties{MaximumQoS: packet.Some[uint8](1),
				RetainAvailable: packet.Some[uint8](0)}},
			p5: &p5.Connack{Properties: &p5.Properties{MaximumQOS: new(byte(1)), RetainAvailable: new(byte(0))}}},
		{name: "5.0/connack/assigned-id-features", v: packet.V5,
			ours: &packet.Connack{Props: packet.Properties{AssignedClientID: str("auto-7f3a"),
				ServerKeepAlive: packet.Some[uint16](120), WildcardSubAvailable: packet.Some[uint8](0),
				SubIDAvailable: packet.Some[uint8](0), SharedSubAvailable: packet.Some[uint8](1)}},
			p5: &p5.Connack{Properties: &p5.Properties{AssignedClientID: "auto-7f3a",
				ServerKeepAlive: new(uint16(120)), WildcardSubAvailable: new(byte(0)),
				SubIDAvailable: new(byte(0)), SharedSubAvailable: new(byte(1))}}},
		{name: "5.0/connack/session-auth-reference", v: packet.V5,
			ours: &packet.Connack{Code: packet.UseAnotherServer, Props: packet.Properties{
				SessionExpiry: packet.Some[uint32](0), AuthMethod: str("SCRAM-SHA-256"),
				AuthData: []byte{9, 8, 7}, ServerReference: str("other.example:1883"),
				ReasonString: str("moving"), User: oursUser}},
			p5: &p5.Connack{ReasonCode: p5.ConnackUseAnotherServer, Properties: &p5.Properties{
				SessionExpiryInterval: new(uint32(0)), AuthMethod: "SCRAM-SHA-256", AuthData: []byte{9, 8, 7},
				ServerReference: "other.example:1883", ReasonString: "moving", User: pahoUser}}},
		{name: "5.0/connack/response-info", v: packet.V5,
			ours: &packet.Connack{Props: packet.Properties{ResponseInfo: str("resp/c5/"), User: oursUser}},
			p5:   &p5.Connack{Properties: &p5.Properties{ResponseInfo: "resp/c5/", User: pahoUser}}},
		{name: "5.0/connack/all-props", v: packet.V5,
			differ: "paho.golang writes CONNACK properties in its own order (receive maximum, topic " +
				"alias maximum, maximum packet size, maximum QoS, assigned client id, …), we by " +
				"identifier; spec 2.2.2.2 fixes no order",
			ours: &packet.Connack{SessionPresent: true, Props: packet.Properties{
				SessionExpiry: packet.Some[uint32](3600), ReceiveMaximum: packet.Some[uint16](50),
				MaximumQoS: packet.Some[uint8](0), RetainAvailable: packet.Some[uint8](1),
				MaximumPacketSize: packet.Some[uint32](65536), AssignedClientID: str("auto-1"),
				TopicAliasMaximum: packet.Some[uint16](32), ReasonString: str("welcome"), User: oursUser,
				WildcardSubAvailable: packet.Some[uint8](1), SubIDAvailable: packet.Some[uint8](1),
				SharedSubAvailable: packet.Some[uint8](0), ServerKeepAlive: packet.Some[uint16](60),
				ResponseInfo: str("resp/"), ServerReference: str("backup:1883"),
				AuthMethod: str("KERBEROS"), AuthData: []byte{0x60, 0x82}}},
			p5: &p5.Connack{SessionPresent: true, Properties: &p5.Properties{
				SessionExpiryInterval: new(uint32(3600)), ReceiveMaximum: new(uint16(50)),
				MaximumQOS: new(byte(0)), RetainAvailable: new(byte(1)), MaximumPacketSize: new(uint32(65536)),
				AssignedClientID: "auto-1", TopicAliasMaximum: new(uint16(32)), ReasonString: "welcome",
				User: pahoUser, WildcardSubAvailable: new(byte(1)), SubIDAvailable: new(byte(1)),
				SharedSubAvailable: new(byte(0)), ServerKeepAlive: new(uint16(60)), ResponseInfo: "resp/",
				ServerReference: "backup:1883", AuthMethod: "KERBEROS", AuthData: []byte{0x60, 0x82}}}},

		{name: "5.0/publish/qos0-no-props", v: packet.V5,
			ours: &packet.Publish{Topic: str("a/b"), Payload: str("hello")},
			p5:   &p5.Publish{Topic: "a/b", Payload: str("hello")}},
		{name: "5.0/publish/qos1-retain-message-props", v: packet.V5,
			ours: &packet.Publish{Topic: str("req/c5"), Payload: str(`{"q":1}`), QoS: 1, PacketID: 77,
				Retain: true, Props: packet.Properties{PayloadFormat: packet.Some[uint8](1),
					MessageExpiry: packet.Some[uint32](60), ContentType: str("application/json"),
					ResponseTopic: str("reply/c5"), CorrelationData: []byte{1, 2, 3},
					SubscriptionIDs: []uint32{42}, User: oursUser}},
			p5: &p5.Publish{Topic: "req/c5", Payload: str(`{"q":1}`), QoS: 1, PacketID: 77, Retain: true,
				Properties: &p5.Properties{PayloadFormat: new(byte(1)), MessageExpiry: new(uint32(60)),
					ContentType: "application/json", ResponseTopic: "reply/c5", CorrelationData: []byte{1, 2, 3},
					SubscriptionIdentifier: new(42), User: pahoUser}}},
		{name: "5.0/publish/qos2-dup-alias", v: packet.V5,
			ours: &packet.Publish{Topic: str("long/topic/name"), Payload: []byte{0, 0xff}, QoS: 2,
				PacketID: 0xfffe, Dup: true, Props: packet.Properties{TopicAlias: packet.Some[uint16](5),
					User: oursUser}},
			p5: &p5.Publish{Topic: "long/topic/name", Payload: []byte{0, 0xff}, QoS: 2, PacketID: 0xfffe,
				Duplicate: true, Properties: &p5.Properties{TopicAlias: new(uint16(5)), User: pahoUser}}},
		{name: "5.0/publish/alias-only", v: packet.V5,
			ours: &packet.Publish{Topic: str(""), Payload: str("p"), Props: packet.Properties{
				TopicAlias: packet.Some[uint16](0xffff)}},
			p5: &p5.Publish{Topic: "", Payload: str("p"), Properties: &p5.Properties{TopicAlias: new(uint16(0xffff))}}},
		{name: "5.0/publish/qos1-empty-payload-format-0", v: packet.V5,
			ours: &packet.Publish{Topic: str("t"), Payload: []byte{}, QoS: 1, PacketID: 1,
				Props: packet.Properties{PayloadFormat: packet.Some[uint8](0), MessageExpiry: packet.Some[uint32](0)}},
			p5: &p5.Publish{Topic: "t", QoS: 1, PacketID: 1, Properties: &p5.Properties{
				PayloadFormat: new(byte(0)), MessageExpiry: new(uint32(0))}}},
		{name: "5.0/publish/qos1-4-byte-remaining-length", v: packet.V5,
			ours: &packet.Publish{Topic: str("huge"), Payload: bytes.Repeat([]byte{0xa5}, 1<<21), QoS: 1,
				PacketID: 3, Props: packet.Properties{PayloadFormat: packet.Some[uint8](0)}},
			p5: &p5.Publish{Topic: "huge", Payload: bytes.Repeat([]byte{0xa5}, 1<<21), QoS: 1, PacketID: 3,
				Properties: &p5.Properties{PayloadFormat: new(byte(0))}}},
		{name: "5.0/publish/all-props", v: packet.V5,
			differ: "paho.golang writes the topic alias (0x23) before the subscription identifier " +
				"(0x0B), we by identifier; spec 2.2.2.2 fixes no order",
			ours: &packet.Publish{Topic: str("a/b"), Payload: str("{}"), QoS: 1, PacketID: 9, Retain: true,
				Props: packet.Properties{PayloadFormat: packet.Some[uint8](1), MessageExpiry: packet.Some[uint32](3600),
					ContentType: str("application/json"), ResponseTopic: str("reply/here"),
					CorrelationData: []byte{0xde, 0xad}, SubscriptionIDs: []uint32{268_435_455},
					TopicAlias: packet.Some[uint16](3), User: oursUser}},
			p5: &p5.Publish{Topic: "a/b", Payload: str("{}"), QoS: 1, PacketID: 9, Retain: true,
				Properties: &p5.Properties{PayloadFormat: new(byte(1)), MessageExpiry: new(uint32(3600)),
					ContentType: "application/json", ResponseTopic: "reply/here", CorrelationData: []byte{0xde, 0xad},
					SubscriptionIdentifier: new(268_435_455), TopicAlias: new(uint16(3)), User: pahoUser}}},
		{name: "5.0/publish/several-sub-ids", v: packet.V5,
			lossy: "paho.golang holds one subscription identifier (Properties.SubscriptionIdentifier " +
				"*int), though spec 3.3.2.3.8 lets a PUBLISH carry several: it can send one, and " +
				"decoding several it keeps the last",
			ours:         publishSubIDs(1, 200, 16384, 268_435_455),
			p5:           &p5.Publish{Topic: "s", Payload: str("x"), Properties: &p5.Properties{SubscriptionIdentifier: new(128)}},
			oursFromPaho: publishSubIDs(128),
			pahoFromOurs: &p5.Publish{Topic: "s", Payload: str("x"), Properties: &p5.Properties{
				SubscriptionIdentifier: new(268_435_455)}}},

		{name: "5.0/puback/success", v: packet.V5,
			differ: "paho.golang always writes the reason code and a property length; spec 3.4.2.1 " +
				"lets a sender omit both for Success without properties, as we do",
			ours: &packet.Ack{PacketType: packet.PUBACK, PacketID: 1},
			p5:   &p5.Puback{PacketID: 1}},
		{name: "5.0/puback/quota-exceeded-no-props", v: packet.V5,
			differ: "paho.golang always writes a PUBACK property length; spec 3.4.2.2.1 lets a sender " +
				"omit it without properties, as we do",
			ours: &packet.Ack{PacketType: packet.PUBACK, PacketID: 2, Code: packet.QuotaExceeded},
			p5:   &p5.Puback{PacketID: 2, ReasonCode: p5.PubackQuotaExceeded}},
		{name: "5.0/pubrec/success", v: packet.V5,
			differ: "paho.golang always writes the reason code; spec 3.5.2.1 lets a sender omit it " +
				"for Success without properties, as we do",
			ours: &packet.Ack{PacketType: packet.PUBREC, PacketID: 3},
			p5:   &p5.Pubrec{PacketID: 3}},
		{name: "5.0/pubrec/no-matching-subscribers-no-props", v: packet.V5,
			ours: &packet.Ack{PacketType: packet.PUBREC, PacketID: 4, Code: packet.NoMatchingSubscribers},
			p5:   &p5.Pubrec{PacketID: 4, ReasonCode: p5.PubrecNoMatchingSubscribers}},
		{name: "5.0/pubrel/success", v: packet.V5,
			differ: "paho.golang always writes the reason code; spec 3.6.2.1 lets a sender omit it " +
				"for Success without properties, as we do",
			ours: &packet.Ack{PacketType: packet.PUBREL, PacketID: 5},
			p5:   &p5.Pubrel{PacketID: 5}},
		{name: "5.0/pubrel/not-found-no-props", v: packet.V5,
			ours: &packet.Ack{PacketType: packet.PUBREL, PacketID: 6, Code: packet.PacketIdentifierNotFound},
			p5:   &p5.Pubrel{PacketID: 6, ReasonCode: 0x92}},
		{name: "5.0/pubcomp/success", v: packet.V5,
			differ: "paho.golang always writes the reason code; spec 3.7.2.1 lets a sender omit it " +
				"for Success without properties, as we do",
			ours: &packet.Ack{PacketType: packet.PUBCOMP, PacketID: 7},
			p5:   &p5.Pubcomp{PacketID: 7}},
		{name: "5.0/pubcomp/not-found-no-props", v: packet.V5,
			ours: &packet.Ack{PacketType: packet.PUBCOMP, PacketID: 0xffff, Code: packet.PacketIdentifierNotFound},
			p5:   &p5.Pubcomp{PacketID: 0xffff, ReasonCode: p5.PubcompPacketIdentifierNotFound}},

		{name: "5.0/subscribe/options", v: packet.V5,
			ours: &packet.Subscribe{PacketID: 12, Props: packet.Properties{SubscriptionIDs: []uint32{16384},
				User: oursUser}, Subscriptions: []packet.Subscription{
				{Filter: str("a/b"), QoS: 0},
				{Filter: str("a/+/c"), QoS: 1, NoLocal: true},
				{Filter: str("#"), QoS: 2, RetainAsPublished: true, RetainHandling: 1},
				{Filter: str("$share/grp/x/#"), QoS: 1, RetainHandling: 2},
				{Filter: str("d/e"), QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2}}},
			p5: &p5.Subscribe{PacketID: 12, Properties: &p5.Properties{SubscriptionIdentifier: new(16384),
				User: pahoUser}, Subscriptions: []p5.SubOptions{
				{Topic: "a/b", QoS: 0},
				{Topic: "a/+/c", QoS: 1, NoLocal: true},
				{Topic: "#", QoS: 2, RetainAsPublished: true, RetainHandling: p5.RetainSendOnSubscribeIfNew},
				{Topic: "$share/grp/x/#", QoS: 1, RetainHandling: p5.RetainDoNotSend},
				{Topic: "d/e", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: p5.RetainDoNotSend}}}},
		{name: "5.0/subscribe/no-props", v: packet.V5,
			ours: &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: str("t"), QoS: 1}}},
			p5:   &p5.Subscribe{PacketID: 1, Subscriptions: []p5.SubOptions{{Topic: "t", QoS: 1}}}},
		{name: "5.0/suback/all-codes", v: packet.V5,
			ours: &packet.Suback{PacketID: 12, Props: packet.Properties{ReasonString: str("partly"),
				User: oursUser}, Codes: subackCodes},
			p5: &p5.Suback{PacketID: 12, Properties: &p5.Properties{ReasonString: "partly", User: pahoUser},
				Reasons: wire(subackCodes)}},
		{name: "5.0/suback/no-props", v: packet.V5,
			ours: &packet.Suback{PacketID: 1, Codes: []packet.ReasonCode{packet.GrantedQoS1}},
			p5:   &p5.Suback{PacketID: 1, Reasons: []byte{1}}},
		{name: "5.0/unsubscribe/user-props", v: packet.V5,
			ours: &packet.Unsubscribe{PacketID: 13, Props: packet.Properties{User: oursUser},
				Filters: [][]byte{str("a/b"), str("$share/grp/x/#"), str("#")}},
			p5: &p5.Unsubscribe{PacketID: 13, Properties: &p5.Properties{User: pahoUser},
				Topics: []string{"a/b", "$share/grp/x/#", "#"}}},
		{name: "5.0/unsubscribe/no-props", v: packet.V5,
			ours: &packet.Unsubscribe{PacketID: 1, Filters: [][]byte{str("t")}},
			p5:   &p5.Unsubscribe{PacketID: 1, Topics: []string{"t"}}},
		{name: "5.0/unsuback/all-codes", v: packet.V5,
			ours: &packet.Unsuback{PacketID: 13, Props: packet.Properties{ReasonString: str("mixed"),
				User: oursUser}, Codes: unsubackCodes},
			p5: &p5.Unsuback{PacketID: 13, Properties: &p5.Properties{ReasonString: "mixed", User: pahoUser},
				Reasons: wire(unsubackCodes)}},
		{name: "5.0/unsuback/no-props", v: packet.V5,
			ours: &packet.Unsuback{PacketID: 1, Codes: []packet.ReasonCode{packet.Success}},
			p5:   &p5.Unsuback{PacketID: 1, Reasons: []byte{0}}},
		{name: "5.0/pingreq", v: packet.V5, ours: &packet.Pingreq{}, p5: &p5.Pingreq{}},
		{name: "5.0/pingresp", v: packet.V5, ours: &packet.Pingresp{}, p5: &p5.Pingresp{}},

		{name: "5.0/disconnect/normal", v: packet.V5,
			differ: "paho.golang always writes the reason code and a property length; spec " +
				"3.14.2.1 lets a sender omit both (remaining length 0), as we do",
			pahoCannotDecode: "paho.golang's Disconnect.Unpack reads the reason code " +
				"unconditionally and returns io.EOF for remaining length 0, which spec 3.14.2.1 " +
				"defines as Normal disconnection",
			ours: &packet.Disconnect{},
			p5:   &p5.Disconnect{}},
		{name: "5.0/disconnect/with-will-no-props", v: packet.V5,
			differ: "paho.golang always writes a property length; spec 3.14.2.2.1 lets a sender omit " +
				"it without properties, as we do",
			ours: &packet.Disconnect{Code: packet.DisconnectWithWillMessage},
			p5:   &p5.Disconnect{ReasonCode: p5.DisconnectDisconnectWithWillMessage}},
		{name: "5.0/disconnect/all-props", v: packet.V5,
			ours: &packet.Disconnect{Code: packet.ServerMoved, Props: packet.Properties{
				SessionExpiry: packet.Some[uint32](0), ServerReference: str("new.example:8883"),
				ReasonString: str("migrated"), User: oursUser}},
			p5: &p5.Disconnect{ReasonCode: p5.DisconnectServerMoved, Properties: &p5.Properties{
				SessionExpiryInterval: new(uint32(0)), ServerReference: "new.example:8883",
				ReasonString: "migrated", User: pahoUser}}},
		{name: "5.0/disconnect/session-expiry", v: packet.V5,
			ours: &packet.Disconnect{Props: packet.Properties{SessionExpiry: packet.Some[uint32](300)}},
			p5:   &p5.Disconnect{Properties: &p5.Properties{SessionExpiryInterval: new(uint32(300))}}},

		{name: "5.0/auth/empty", v: packet.V5,
			differ: "paho.golang always writes the reason code and a property length; spec 3.15.2.1 " +
				"lets a sender omit both for Success without properties, as we do",
			ours: &packet.Auth{},
			p5:   &p5.Auth{}},
		{name: "5.0/auth/continue", v: packet.V5,
			ours: &packet.Auth{Code: packet.ContinueAuthentication, Props: packet.Properties{
				AuthMethod: str("SCRAM-SHA-256"), AuthData: []byte{'r', '=', 0, 0xff},
				ReasonString: str("server-first"), User: oursUser}},
			p5: &p5.Auth{ReasonCode: p5.AuthContinueAuthentication, Properties: &p5.Properties{
				AuthMethod: "SCRAM-SHA-256", AuthData: []byte{'r', '=', 0, 0xff},
				ReasonString: "server-first", User: pahoUser}}},
		{name: "5.0/auth/re-authenticate", v: packet.V5,
			ours: &packet.Auth{Code: packet.ReAuthenticate, Props: packet.Properties{AuthMethod: str("SCRAM-SHA-256")}},
			p5:   &p5.Auth{ReasonCode: p5.AuthReauthenticate, Properties: &p5.Properties{AuthMethod: "SCRAM-SHA-256"}}},
		{name: "5.0/auth/success-with-data", v: packet.V5,
			ours: &packet.Auth{Props: packet.Properties{AuthMethod: str("SCRAM-SHA-256"), AuthData: []byte{'v', '='}}},
			p5:   &p5.Auth{Properties: &p5.Properties{AuthMethod: "SCRAM-SHA-256", AuthData: []byte{'v', '='}}}},
	}

	// Every reason code each 5.0 packet may carry (spec 2.4, and the reason code tables of
	// 3.2.2.2, 3.4.2.1, 3.5.2.1, 3.6.2.1, 3.7.2.1 and 3.14.2.1), each with a reason string so
	// that paho, which always writes a property length, writes what we write.
	for _, c := range connackCodes {
		cases = append(cases, pahoCase{name: "5.0/connack/" + slug(c), v: packet.V5,
			ours: &packet.Connack{Code: c, Props: packet.Properties{ReasonString: str(c.String())}},
			p5:   &p5.Connack{ReasonCode: byte(c), Properties: &p5.Properties{ReasonString: c.String()}}})
	}
	for _, t := range []packet.Type{packet.PUBACK, packet.PUBREC, packet.PUBREL, packet.PUBCOMP} {
		codes := pubackCodes
		if t == packet.PUBREL || t == packet.PUBCOMP {
			codes = pubrelCodes
		}
		for i, c := range codes {
			id := uint16(0x100 + i)
			cases = append(cases, pahoCase{name: "5.0/" + strings.ToLower(t.String()) + "/" + slug(c), v: packet.V5,
				ours: &packet.Ack{PacketType: t, PacketID: id, Code: c, Props: packet.Properties{
					ReasonString: str(c.String()), User: oursUser}},
				p5: pahoAck(t, id, byte(c), &p5.Properties{ReasonString: c.String(), User: pahoUser})})
		}
	}
	for _, c := range disconnectCodes {
		cases = append(cases, pahoCase{name: "5.0/disconnect/" + slug(c), v: packet.V5,
			ours: &packet.Disconnect{Code: c, Props: packet.Properties{ReasonString: str(c.String())}},
			p5:   &p5.Disconnect{ReasonCode: byte(c), Properties: &p5.Properties{ReasonString: c.String()}}})
	}
	return cases
}

// The reason codes the spec allows per packet, written out from its tables rather than
// taken from the codec.
var (
	connackCodes = []packet.ReasonCode{packet.Success, packet.UnspecifiedError,
		packet.MalformedPacket, packet.ProtocolError, packet.ImplementationSpecificError,
		packet.UnsupportedProtocolVersion, packet.ClientIdentifierNotValid,
		packet.BadUserNameOrPassword, packet.NotAuthorized, packet.ServerUnavailable,
		packet.ServerBusy, packet.Banned, packet.BadAuthenticationMethod, packet.TopicNameInvalid,
		packet.PacketTooLarge, packet.QuotaExceeded, packet.PayloadFormatInvalid,
		packet.RetainNotSupported, packet.QoSNotSupported, packet.UseAnotherServer,
		packet.ServerMoved, packet.ConnectionRateExceeded}
	pubackCodes = []packet.ReasonCode{packet.Success, packet.NoMatchingSubscribers,
		packet.UnspecifiedError, packet.ImplementationSpecificError, packet.NotAuthorized,
		packet.TopicNameInvalid, packet.PacketIdentifierInUse, packet.QuotaExceeded,
		packet.PayloadFormatInvalid}
	pubrelCodes = []packet.ReasonCode{packet.Success, packet.PacketIdentifierNotFound}
	subackCodes = []packet.ReasonCode{packet.GrantedQoS0, packet.GrantedQoS1, packet.GrantedQoS2,
		packet.UnspecifiedError, packet.ImplementationSpecificError, packet.NotAuthorized,
		packet.TopicFilterInvalid, packet.PacketIdentifierInUse, packet.QuotaExceeded,
		packet.SharedSubscriptionsNotSupported, packet.SubscriptionIdentifiersNotSupported,
		packet.WildcardSubscriptionsNotSupported}
	unsubackCodes = []packet.ReasonCode{packet.Success, packet.NoSubscriptionExisted,
		packet.UnspecifiedError, packet.ImplementationSpecificError, packet.NotAuthorized,
		packet.TopicFilterInvalid, packet.PacketIdentifierInUse}
	disconnectCodes = []packet.ReasonCode{packet.NormalDisconnection,
		packet.DisconnectWithWillMessage, packet.UnspecifiedError, packet.MalformedPacket,
		packet.ProtocolError, packet.ImplementationSpecificError, packet.NotAuthorized,
		packet.ServerBusy, packet.ServerShuttingDown, packet.KeepAliveTimeout,
		packet.SessionTakenOver, packet.TopicFilterInvalid, packet.TopicNameInvalid,
		packet.ReceiveMaximumExceeded, packet.TopicAliasInvalid, packet.PacketTooLarge,
		packet.MessageRateTooHigh, packet.QuotaExceeded, packet.AdministrativeAction,
		packet.PayloadFormatInvalid, packet.RetainNotSupported, packet.QoSNotSupported,
		packet.UseAnotherServer, packet.ServerMoved, packet.SharedSubscriptionsNotSupported,
		packet.ConnectionRateExceeded, packet.MaximumConnectTime,
		packet.SubscriptionIdentifiersNotSupported, packet.WildcardSubscriptionsNotSupported}
)

// connectWith is a 5.0 CONNECT with a QoS 1 will carrying the given will properties.
func connectWith(will packet.Properties) *packet.Connect {
	return &packet.Connect{ProtocolName: str("MQTT"), Version: packet.V5, ClientID: str("c5"),
		WillFlag: true, WillQoS: 1, WillProps: will, WillTopic: str("will/c5"), WillPayload: str("gone")}
}

// publishSubIDs is a 5.0 QoS 0 PUBLISH matched by subscriptions with the given identifiers.
func publishSubIDs(ids ...uint32) *packet.Publish {
	return &packet.Publish{Topic: str("s"), Payload: str("x"), Props: packet.Properties{SubscriptionIDs: ids}}
}

// pahoAck is paho.golang's PUBACK, PUBREC, PUBREL or PUBCOMP.
func pahoAck(t packet.Type, id uint16, code byte, props *p5.Properties) p5.Packet {
	switch t {
	case packet.PUBACK:
		return &p5.Puback{PacketID: id, ReasonCode: code, Properties: props}
	case packet.PUBREC:
		return &p5.Pubrec{PacketID: id, ReasonCode: code, Properties: props}
	case packet.PUBREL:
		return &p5.Pubrel{PacketID: id, ReasonCode: code, Properties: props}
	}
	return &p5.Pubcomp{PacketID: id, ReasonCode: code, Properties: props}
}

// wire is reason codes as the bytes paho holds them in.
func wire(codes []packet.ReasonCode) []byte {
	b := make([]byte, len(codes))
	for i, c := range codes {
		b[i] = byte(c)
	}
	return b
}

// slug names a subtest after a reason code: "QoS not supported" becomes "qos-not-supported".
func slug(c packet.ReasonCode) string {
	return strings.ReplaceAll(strings.ToLower(c.String()), " ", "-")
}

// pahoEncode encodes the case's paho packet with paho.
func pahoEncode(tc pahoCase) ([]byte, error) {
	var buf bytes.Buffer
	if tc.v == packet.V5 {
		_, err := tc.p5.WriteTo(&buf)
		return buf.Bytes(), err
	}
	err := tc.p3.Write(&buf)
	return buf.Bytes(), err
}

// decodeOurs decodes b, which must hold exactly one packet, with our codec.
func decodeOurs(b []byte, v packet.Version) (packet.Packet, error) {
	h, n, err := packet.ParseHeader(b, v)
	if err != nil {
		return nil, err
	}
	if n == 0 || h.Size() != len(b) {
		return nil, fmt.Errorf("fixed header announces %d bytes, have %d", h.Size(), len(b))
	}
	return packet.Decode(h, b[n:], v)
}

// decodePaho decodes b, which must hold exactly one packet, with paho: a p3.ControlPacket
// before 5.0, else the Content of a p5.ControlPacket.
func decodePaho(b []byte, v packet.Version) (any, error) {
	r := bytes.NewReader(b)
	var p any
	if v == packet.V5 {
		cp, err := p5.ReadPacket(r)
		if err != nil {
			return nil, err
		}
		p = cp.Content
	} else {
		cp, err := p3.ReadPacket(r)
		if err != nil {
			return nil, err
		}
		p = cp
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("paho left %d of %d bytes unread", r.Len(), len(b))
	}
	return p, nil
}

// diff reports the first difference between got and want as "field: got X, want Y", or ""
// when they match. Repeated fields match when both are empty, nil or not, and a nil
// pointer to a struct matches a pointer to the zero struct (paho leaves absent Properties
// nil or empty as it goes). exactBytes keeps nil and empty []byte apart, which in our
// packets is an absent property against an empty one; paho has no such difference. Fields
// named RemainingLength are skipped: paho.mqtt.golang fills them in on Write and on
// decoding, and lengths are checked on their own.
func diff(got, want any, exactBytes bool) string {
	return diffValue(reflect.ValueOf(got), reflect.ValueOf(want), "packet", exactBytes)
}

func diffValue(got, want reflect.Value, path string, exactBytes bool) string {
	if !got.IsValid() || !want.IsValid() || got.Type() != want.Type() {
		return fmt.Sprintf("%s: got %#v, want %#v", path, got, want)
	}
	switch got.Kind() {
	case reflect.Interface, reflect.Pointer:
		if got.IsNil() && want.IsNil() {
			return ""
		}
		if got.IsNil() || want.IsNil() {
			if got.Kind() == reflect.Interface || got.Type().Elem().Kind() != reflect.Struct {
				return fmt.Sprintf("%s: got %s, want %s", path, show(got), show(want))
			}
			if got.IsNil() {
				got = reflect.New(got.Type().Elem())
			} else {
				want = reflect.New(want.Type().Elem())
			}
		}
		return diffValue(got.Elem(), want.Elem(), path, exactBytes)
	case reflect.Struct:
		for i := range got.NumField() {
			f := got.Type().Field(i)
			if f.Name == "RemainingLength" {
				continue
			}
			if d := diffValue(got.Field(i), want.Field(i), path+"."+f.Name, exactBytes); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice:
		if got.Type().Elem() == reflect.TypeFor[byte]() {
			g, w := got.Bytes(), want.Bytes()
			if !bytes.Equal(g, w) || exactBytes && (g == nil) != (w == nil) {
				return fmt.Sprintf("%s: got %s, want %s", path, show(got), show(want))
			}
			return ""
		}
		if got.Len() != want.Len() {
			return fmt.Sprintf("%s: got %d elements %s, want %d %s", path, got.Len(), show(got),
				want.Len(), show(want))
		}
		for i := range got.Len() {
			if d := diffValue(got.Index(i), want.Index(i), fmt.Sprintf("%s[%d]", path, i), exactBytes); d != "" {
				return d
			}
		}
		return ""
	}
	if !got.Equal(want) {
		return fmt.Sprintf("%s: got %s, want %s", path, show(got), show(want))
	}
	return ""
}

// show formats a value for diff: strings and byte slices quoted, reason codes in hex and
// words, nil pointers as nil, other pointers by what they point to.
func show(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[packet.ReasonCode]():
		return fmt.Sprintf("0x%02x (%s)", v.Uint(), packet.ReasonCode(v.Uint()).String())
	case v.Kind() == reflect.String:
		return fmt.Sprintf("%q", v.String())
	case v.Kind() == reflect.Slice && v.Type().Elem() == reflect.TypeFor[byte]():
		if v.IsNil() {
			return "nil"
		}
		return fmt.Sprintf("%q", v.Bytes())
	case v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface:
		if v.IsNil() {
			return "nil"
		}
		return "&" + show(v.Elem())
	}
	return fmt.Sprintf("%+v", v)
}
