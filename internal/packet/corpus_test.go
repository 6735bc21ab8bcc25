package packet

import (
	"bytes"
	"reflect"
	"testing"
)

// corpusCase is one packet as raw bytes and as a struct. The same table drives decoding
// (raw → struct) and encoding (struct → raw), so the two directions cannot drift apart.
type corpusCase struct {
	name string
	v    Version
	raw  []byte
	pkt  Packet
}

func b(s string) []byte { return []byte(s) }

// corpus covers every packet type in every version it exists in, with and without the
// optional parts. Raw bytes are written out by hand from the spec, not produced by our
// encoder.
var corpus = []corpusCase{
	{"connect/3.1/minimal", V31, []byte{
		0x10, 0x12, 0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 3, 0x02, 0, 30, 0, 4, 'c', 'i', 'd', '1'},
		&Connect{ProtocolName: b("MQIsdp"), Version: V31, CleanStart: true, KeepAlive: 30, ClientID: b("cid1")}},
	{"connect/3.1.1/minimal", V311, []byte{
		0x10, 0x10, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 4, 'c', 'i', 'd', '1'},
		&Connect{ProtocolName: b("MQTT"), Version: V311, CleanStart: true, KeepAlive: 60, ClientID: b("cid1")}},
	{"connect/3.1.1/empty-client-id", V311, []byte{
		0x10, 0x0c, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, 0},
		&Connect{ProtocolName: b("MQTT"), Version: V311, CleanStart: true, ClientID: b("")}},
	{"connect/3.1.1/will-user-password", V311, []byte{
		0x10, 0x1d, 0, 4, 'M', 'Q', 'T', 'T', 4, 0xf6, 0, 10, 0, 1, 'c',
		0, 3, 'a', '/', 'b', 0, 2, 'h', 'i', 0, 1, 'u', 0, 2, 'p', 'w'},
		&Connect{ProtocolName: b("MQTT"), Version: V311, CleanStart: true, KeepAlive: 10, ClientID: b("c"),
			WillFlag: true, WillQoS: 2, WillRetain: true, WillTopic: b("a/b"), WillPayload: b("hi"),
			UsernameFlag: true, Username: b("u"), PasswordFlag: true, Password: b("pw")}},
	{"connect/5.0/properties-and-will", V5, []byte{
		0x10, 0x33, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x0e, 0, 20,
		15, 0x11, 0, 0, 0, 60, 0x21, 0, 10, 0x26, 0, 1, 'k', 0, 1, 'v',
		0, 1, 'c',
		12, 0x01, 1, 0x03, 0, 2, 't', 'x', 0x18, 0, 0, 0, 5,
		0, 1, 'w', 0, 4, 'b', 'y', 'e', '!'},
		&Connect{ProtocolName: b("MQTT"), Version: V5, CleanStart: true, KeepAlive: 20, ClientID: b("c"),
			Props: Properties{SessionExpiry: Some[uint32](60), ReceiveMaximum: Some[uint16](10),
				User: []UserProperty{{b("k"), b("v")}}},
			WillFlag: true, WillQoS: 1, WillTopic: b("w"), WillPayload: b("bye!"),
			WillProps: Properties{PayloadFormat: Some[uint8](1), WillDelay: Some[uint32](5), ContentType: b("tx")}}},
	{"connect/5.0/password-without-user", V5, []byte{
		0x10, 0x12, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x40, 0, 0, 0, 0, 1, 'c', 0, 2, 'p', 'w'},
		&Connect{ProtocolName: b("MQTT"), Version: V5, ClientID: b("c"), PasswordFlag: true, Password: b("pw")}},

	{"connack/3.1.1/accepted-session-present", V311, []byte{0x20, 2, 1, 0}, &Connack{SessionPresent: true}},
	{"connack/3.1.1/not-authorized", V311, []byte{0x20, 2, 0, 5}, &Connack{Code: NotAuthorized}},
	{"connack/5.0/properties", V5, []byte{0x20, 0x0f, 0, 0, 12,
		0x12, 0, 2, 'i', 'd', 0x13, 0, 30, 0x24, 1, 0x25, 0},
		&Connack{Props: Properties{MaximumQoS: Some[uint8](1), RetainAvailable: Some[uint8](0),
			ServerKeepAlive: Some[uint16](30), AssignedClientID: b("id")}}},
	{"connack/5.0/bad-credentials", V5, []byte{0x20, 3, 0, 0x86, 0}, &Connack{Code: BadUserNameOrPassword}},

	{"publish/3.1.1/qos0", V311, []byte{0x30, 7, 0, 3, 'a', '/', 'b', 'h', 'i'},
		&Publish{Topic: b("a/b"), Payload: b("hi")}},
	{"publish/3.1.1/qos1-retain-dup", V311, []byte{0x3b, 7, 0, 1, 't', 0, 7, 'x', 'y'},
		&Publish{Topic: b("t"), Payload: b("xy"), PacketID: 7, QoS: 1, Dup: true, Retain: true}},
	{"publish/3.1.1/qos2-empty-payload", V311, []byte{0x34, 5, 0, 1, 't', 0x12, 0x34},
		&Publish{Topic: b("t"), Payload: []byte{}, PacketID: 0x1234, QoS: 2}},
	{"publish/5.0/qos0-no-props", V5, []byte{0x30, 5, 0, 1, 't', 0, 'p'},
		&Publish{Topic: b("t"), Payload: b("p")}},
	{"publish/5.0/qos1-all-props", V5, []byte{0x32, 0x32, 0, 1, 't', 0, 9,
		0x2a,
		0x01, 1, 0x02, 0, 0, 0, 60, 0x03, 0, 1, 'j', 0x08, 0, 1, 'r', 0x09, 0, 2, 1, 2,
		0x0b, 5, 0x0b, 0x80, 0x01, 0x23, 0, 3, 0x26, 0, 1, 'a', 0, 1, 'b',
		0x26, 0, 1, 'a', 0, 1, 'c',
		'{', '}'},
		&Publish{Topic: b("t"), PacketID: 9, QoS: 1, Payload: b("{}"), Props: Properties{
			PayloadFormat: Some[uint8](1), MessageExpiry: Some[uint32](60), TopicAlias: Some[uint16](3),
			SubscriptionIDs: []uint32{5, 128}, ContentType: b("j"), ResponseTopic: b("r"),
			CorrelationData: []byte{1, 2}, User: []UserProperty{{b("a"), b("b")}, {b("a"), b("c")}}}}},
	{"publish/5.0/alias-only", V5, []byte{0x30, 6, 0, 0, 3, 0x23, 0, 1},
		&Publish{Topic: b(""), Payload: []byte{}, Props: Properties{TopicAlias: Some[uint16](1)}}},

	{"puback/3.1.1", V311, []byte{0x40, 2, 0, 1}, &Ack{PacketType: PUBACK, PacketID: 1}},
	{"pubrec/3.1.1", V311, []byte{0x50, 2, 0, 2}, &Ack{PacketType: PUBREC, PacketID: 2}},
	{"pubrel/3.1.1", V311, []byte{0x62, 2, 0, 3}, &Ack{PacketType: PUBREL, PacketID: 3}},
	{"pubcomp/3.1.1", V311, []byte{0x70, 2, 0, 4}, &Ack{PacketType: PUBCOMP, PacketID: 4}},
	{"puback/5.0/short", V5, []byte{0x40, 2, 0, 1}, &Ack{PacketType: PUBACK, PacketID: 1}},
	{"puback/5.0/code", V5, []byte{0x40, 3, 0, 1, 0x10}, &Ack{PacketType: PUBACK, PacketID: 1, Code: NoMatchingSubscribers}},
	{"pubrec/5.0/reason-string", V5, []byte{0x50, 8, 0, 1, 0x97, 4, 0x1f, 0, 1, 'q'},
		&Ack{PacketType: PUBREC, PacketID: 1, Code: QuotaExceeded, Props: Properties{ReasonString: b("q")}}},
	{"pubrel/5.0/not-found", V5, []byte{0x62, 3, 0, 1, 0x92}, &Ack{PacketType: PUBREL, PacketID: 1, Code: PacketIdentifierNotFound}},
	{"pubcomp/5.0", V5, []byte{0x70, 2, 0xff, 0xff}, &Ack{PacketType: PUBCOMP, PacketID: 0xffff}},

	{"subscribe/3.1.1", V311, []byte{0x82, 14, 0, 10, 0, 3, 'a', '/', '+', 1, 0, 3, 'b', '/', '#', 2},
		&Subscribe{PacketID: 10, Subscriptions: []Subscription{{Filter: b("a/+"), QoS: 1}, {Filter: b("b/#"), QoS: 2}}}},
	{"subscribe/5.0/options", V5, []byte{0x82, 0x1a, 0, 11, 2, 0x0b, 7,
		0, 1, '#', 0x2e, 0, 14, '$', 's', 'h', 'a', 'r', 'e', '/', 'g', '/', 'a', '/', 'b', '/', 'c', 0x10},
		&Subscribe{PacketID: 11, Props: Properties{SubscriptionIDs: []uint32{7}}, Subscriptions: []Subscription{
			{Filter: b("#"), QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2},
			{Filter: b("$share/g/a/b/c"), RetainHandling: 1}}}},
	{"suback/3.1.1", V311, []byte{0x90, 5, 0, 10, 0, 2, 0x80}, &Suback{PacketID: 10, Codes: []ReasonCode{0, 2, 0x80}}},
	{"suback/5.0", V5, []byte{0x90, 6, 0, 10, 0, 1, 0x87, 0xa2}, &Suback{PacketID: 10, Codes: []ReasonCode{1, NotAuthorized, WildcardSubscriptionsNotSupported}}},
	{"unsubscribe/3.1.1", V311, []byte{0xa2, 10, 0, 3, 0, 1, 'a', 0, 3, '+', '/', '#'},
		&Unsubscribe{PacketID: 3, Filters: [][]byte{b("a"), b("+/#")}}},
	{"unsubscribe/5.0", V5, []byte{0xa2, 0x0d, 0, 3, 7, 0x26, 0, 1, 'k', 0, 1, 'v', 0, 1, 'a'},
		&Unsubscribe{PacketID: 3, Props: Properties{User: []UserProperty{{b("k"), b("v")}}}, Filters: [][]byte{b("a")}}},
	{"unsuback/3.1.1", V311, []byte{0xb0, 2, 0, 3}, &Unsuback{PacketID: 3}},
	{"unsuback/5.0", V5, []byte{0xb0, 5, 0, 3, 0, 0x00, 0x11}, &Unsuback{PacketID: 3, Codes: []ReasonCode{Success, NoSubscriptionExisted}}},
	{"pingreq", V311, []byte{0xc0, 0}, &Pingreq{}},
	{"pingresp", V5, []byte{0xd0, 0}, &Pingresp{}},
	{"disconnect/3.1.1", V311, []byte{0xe0, 0}, &Disconnect{}},
	{"disconnect/5.0/normal", V5, []byte{0xe0, 0}, &Disconnect{}},
	{"disconnect/5.0/with-will", V5, []byte{0xe0, 1, 0x04}, &Disconnect{Code: DisconnectWithWillMessage}},
	{"disconnect/5.0/expiry-and-reference", V5, []byte{0xe0, 0x0e, 0x9c, 12, 0x11, 0, 0, 0, 0, 0x1c, 0, 4, 'h', ':', '8', '8'},
		&Disconnect{Code: UseAnotherServer, Props: Properties{SessionExpiry: Some[uint32](0), ServerReference: b("h:88")}}},
	{"auth/5.0/empty", V5, []byte{0xf0, 0}, &Auth{}},
	{"auth/5.0/continue", V5, []byte{0xf0, 0x0f, 0x18, 13, 0x15, 0, 4, 'S', 'C', 'R', 'M', 0x16, 0, 3, 1, 2, 3},
		&Auth{Code: ContinueAuthentication, Props: Properties{AuthMethod: b("SCRM"), AuthData: []byte{1, 2, 3}}}},
}

func TestCorpusDecode(t *testing.T) {
	for _, tc := range corpus {
		if tc.pkt == nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := ParseHeader(tc.raw, tc.v)
			if err != nil || n == 0 {
				t.Fatalf("ParseHeader: n=%d err=%v", n, err)
			}
			if h.Size() != len(tc.raw) {
				t.Fatalf("header says %d bytes, raw has %d", h.Size(), len(tc.raw))
			}
			got, err := Decode(h, tc.raw[n:], tc.v)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !equalPackets(got, tc.pkt) {
				t.Fatalf("decoded\n%#v\nwant\n%#v", got, tc.pkt)
			}
		})
	}
}

func TestCorpusEncode(t *testing.T) {
	for _, tc := range corpus {
		if tc.pkt == nil {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			got := tc.pkt.AppendTo(nil, tc.v)
			if !bytes.Equal(got, tc.raw) {
				t.Fatalf("encoded\n% x\nwant\n% x", got, tc.raw)
			}
			if n := tc.pkt.Size(tc.v); n != len(got) {
				t.Fatalf("Size = %d, encoded %d bytes", n, len(got))
			}
		})
	}
}

// equalPackets compares two packets, treating nil and empty repeated fields as equal (a
// decoder reusing a value leaves empty slices).
func equalPackets(a, b Packet) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

func normalize(p Packet) Packet {
	np := New(p.Type())
	rv := reflect.ValueOf(np).Elem()
	rv.Set(reflect.ValueOf(p).Elem())
	normalizeValue(rv)
	return np
}

func normalizeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			normalizeValue(v.Field(i))
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Uint8 && v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 && v.IsNil() {
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			// Slices into the input may carry spare capacity; compare contents only.
			ns := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(ns, v)
			v.Set(ns)
			return
		}
		for i := 0; i < v.Len(); i++ {
			normalizeValue(v.Index(i))
		}
	}
}

func TestPublishRawProps(t *testing.T) {
	full := &Publish{Topic: b("t"), QoS: 1, PacketID: 1, Payload: b("x"), Props: Properties{
		MessageExpiry: Some[uint32](9), ContentType: b("j"), User: []UserProperty{{b("k"), b("v")}}}}
	pass := Properties{ContentType: b("j"), User: []UserProperty{{b("k"), b("v")}}}
	split := &Publish{Topic: b("t"), QoS: 1, PacketID: 1, Payload: b("x"),
		Props: Properties{MessageExpiry: Some[uint32](9)}, RawProps: pass.AppendRaw(nil, PUBLISH)}
	want, got := full.AppendTo(nil, V5), split.AppendTo(nil, V5)
	if !bytes.Equal(got, want) || split.Size(V5) != len(want) {
		t.Fatalf("raw props\n% x\nwant\n% x", got, want)
	}
	if v3 := split.AppendTo(nil, V311); !bytes.Equal(v3, full.AppendTo(nil, V311)) {
		t.Fatalf("3.1.1 must drop raw props: % x", v3)
	}
}

// TestDecodeRaw: properties encoded by AppendRaw decode back to the same values, and
// what a PUBLISH may not carry is refused.
func TestDecodeRaw(t *testing.T) {
	in := Properties{PayloadFormat: Some[uint8](1), ContentType: b("application/json"), ResponseTopic: b("r/1"),
		CorrelationData: b("\x00\x01"), User: []UserProperty{{b("k"), b("v")}, {b("k"), b("w")}}}
	var got Properties
	if err := got.DecodeRaw(in.AppendRaw(nil, PUBLISH), PUBLISH); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("DecodeRaw = %+v, want %+v", got, in)
	}
	if err := got.DecodeRaw(nil, PUBLISH); err != nil || !reflect.DeepEqual(got, Properties{User: got.User[:0]}) {
		t.Fatalf("DecodeRaw(nil) = %+v, %v; want none", got, err)
	}
	notPub := Properties{ReasonString: b("no")}
	if err := got.DecodeRaw(notPub.AppendRaw(nil, PUBACK), PUBLISH); err == nil {
		t.Fatal("a reason string decoded as a PUBLISH property")
	}
}
