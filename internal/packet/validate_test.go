package packet

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// badCases are packets that break a rule, each with the reason code the spec prescribes
// and the rule the error must name.
var badCases = []struct {
	name string
	v    Version
	raw  []byte
	code ReasonCode
	rule string
}{
	{"header/reserved-type-0", V311, []byte{0x00, 0}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/auth-in-3.1.1", V311, []byte{0xf0, 0}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/pubrel-flags-0", V311, []byte{0x60, 2, 0, 1}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/subscribe-flags-0", V311, []byte{0x80, 6, 0, 1, 0, 1, 'a', 0}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/unsubscribe-flags-0", V5, []byte{0xa0, 5, 0, 1, 0, 0, 1}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/puback-flags-set", V311, []byte{0x41, 2, 0, 1}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/pingreq-flags-set", V5, []byte{0xc8, 0}, MalformedPacket, "MQTT-2.1.3-1"},
	{"header/publish-qos3", V311, []byte{0x36, 3, 0, 1, 't'}, MalformedPacket, "MQTT-3.3.1-4"},
	{"header/publish-dup-qos0-v5", V5, []byte{0x38, 4, 0, 1, 't', 0}, MalformedPacket, "MQTT-3.3.1-2"},
	{"header/varint-5-bytes", V311, []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, MalformedPacket, "MQTT-1.5.5-1"},

	{"connect/reserved-flag", V311, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x03, 0, 0, 0, 0}, MalformedPacket, "MQTT-3.1.2-3"},
	{"connect/protocol-name", V311, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'X', 4, 0x02, 0, 0, 0, 0}, UnsupportedProtocolVersion, "MQTT-3.1.2-2"},
	{"connect/protocol-level-6", V311, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 6, 0x02, 0, 0, 0, 0}, UnsupportedProtocolVersion, "MQTT-3.1.2-2"},
	{"connect/mqisdp-level-4", V311, []byte{0x10, 14, 0, 6, 'M', 'Q', 'I', 's', 'd', 'p', 4, 0x02, 0, 0, 0, 0}, UnsupportedProtocolVersion, "MQTT-3.1.2-2"},
	{"connect/will-qos-without-will", V311, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x0a, 0, 0, 0, 0}, MalformedPacket, "MQTT-3.1.2-11"},
	{"connect/will-retain-without-will", V311, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x22, 0, 0, 0, 0}, MalformedPacket, "MQTT-3.1.2-11"},
	{"connect/will-qos3", V311, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x1e, 0, 0, 0, 0}, MalformedPacket, "MQTT-3.1.2-12"},
	{"connect/password-without-user-3.1.1", V311, []byte{0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x42, 0, 0, 0, 0, 0, 2, 'p', 'w'}, MalformedPacket, "MQTT-3.1.2-22"},
	{"connect/client-id-nul", V311, []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, 1, 0}, MalformedPacket, "MQTT-1.5.4-1"},
	{"connect/client-id-bad-utf8", V311, []byte{0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, 2, 0xc3, 0x28}, MalformedPacket, "MQTT-1.5.4-1"},
	{"connect/client-id-surrogate", V311, []byte{0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, 3, 0xed, 0xa0, 0x80}, MalformedPacket, "MQTT-1.5.4-1"},
	{"connect/will-topic-wildcard", V311, []byte{0x10, 19, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x06, 0, 0, 0, 0, 0, 1, '#', 0, 0}, MalformedPacket, "MQTT-3.1.3-11"},
	{"connect/truncated", V311, []byte{0x10, 11, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0}, MalformedPacket, "MQTT-1.5"},
	{"connect/trailing-bytes", V311, []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 0, 0, 0, 9}, MalformedPacket, ""},
	{"connect/v5-property-not-allowed", V5, []byte{0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 2, 0x24, 1, 0, 0}, MalformedPacket, "MQTT-2.2.2-2"},
	{"connect/v5-receive-maximum-0", V5, []byte{0x10, 16, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 3, 0x21, 0, 0, 0, 0}, ProtocolError, ""},
	{"connect/v5-duplicate-property", V5, []byte{0x10, 23, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 10, 0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 2, 0, 0}, ProtocolError, "MQTT-2.2.2-2"},
	{"connect/v5-request-problem-2", V5, []byte{0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 2, 0x17, 2, 0, 0}, ProtocolError, ""},
	{"connect/v5-max-packet-size-0", V5, []byte{0x10, 18, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 5, 0x27, 0, 0, 0, 0, 0, 0}, ProtocolError, ""},
	{"connect/v5-unknown-property", V5, []byte{0x10, 15, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 2, 0x7f, 1, 0, 0}, MalformedPacket, "MQTT-2.2.2-2"},
	{"connect/v5-property-length-too-long", V5, []byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 9, 0, 0}, MalformedPacket, "MQTT-2.2.2-1"},
	{"connect/v5-will-delay-in-connect", V5, []byte{0x10, 18, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 5, 0x18, 0, 0, 0, 1, 0, 0}, MalformedPacket, "MQTT-2.2.2-2"},
	{"connect/v5-user-property-bad-utf8", V5, []byte{0x10, 20, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 7, 0x26, 0, 1, 0xff, 0, 1, 'v', 0, 0}, MalformedPacket, "MQTT-1.5.4-1"},

	{"connack/reserved-flags", V311, []byte{0x20, 2, 2, 0}, MalformedPacket, "MQTT-3.2.2-1"},
	{"connack/return-code-6", V311, []byte{0x20, 2, 0, 6}, MalformedPacket, "MQTT-3.2.2-8"},
	{"connack/v5-code-not-allowed", V5, []byte{0x20, 3, 0, 0x8e, 0}, MalformedPacket, "MQTT-3.2.2-8"},

	{"publish/topic-plus", V311, []byte{0x30, 5, 0, 3, 'a', '/', '+'}, MalformedPacket, "MQTT-3.3.2-2"},
	{"publish/topic-hash", V5, []byte{0x30, 4, 0, 1, '#', 0}, MalformedPacket, "MQTT-3.3.2-2"},
	{"publish/topic-empty-3.1.1", V311, []byte{0x30, 2, 0, 0}, ProtocolError, "MQTT-3.3.2-1"},
	{"publish/topic-empty-no-alias-v5", V5, []byte{0x30, 3, 0, 0, 0}, ProtocolError, "MQTT-3.3.2-1"},
	{"publish/topic-nul", V311, []byte{0x30, 4, 0, 2, 'a', 0}, MalformedPacket, "MQTT-1.5.4-1"},
	{"publish/packet-id-0", V311, []byte{0x32, 5, 0, 1, 't', 0, 0}, ProtocolError, "MQTT-2.2.1-3"},
	{"publish/topic-alias-0", V5, []byte{0x30, 7, 0, 1, 't', 3, 0x23, 0, 0}, TopicAliasInvalid, "MQTT-3.3.2-8"},
	{"publish/subscription-id-0", V5, []byte{0x30, 6, 0, 1, 't', 2, 0x0b, 0}, ProtocolError, "MQTT-3.8.2-1"},
	{"publish/response-topic-wildcard", V5, []byte{0x30, 9, 0, 1, 't', 5, 0x08, 0, 2, 'a', '#'}, MalformedPacket, "MQTT-3.3.2-2"},
	{"publish/session-expiry-not-allowed", V5, []byte{0x30, 9, 0, 1, 't', 5, 0x11, 0, 0, 0, 1}, MalformedPacket, "MQTT-2.2.2-2"},
	{"publish/duplicate-topic-alias", V5, []byte{0x30, 10, 0, 1, 't', 6, 0x23, 0, 1, 0x23, 0, 2}, ProtocolError, "MQTT-2.2.2-2"},

	{"puback/packet-id-0", V311, []byte{0x40, 2, 0, 0}, ProtocolError, "MQTT-2.2.1-3"},
	{"puback/too-long-3.1.1", V311, []byte{0x40, 3, 0, 1, 0}, MalformedPacket, ""},
	{"puback/v5-bad-code", V5, []byte{0x40, 3, 0, 1, 0x92}, MalformedPacket, "MQTT-3.4.2-1"},
	{"pubrel/v5-bad-code", V5, []byte{0x62, 3, 0, 1, 0x80}, MalformedPacket, "MQTT-3.4.2-1"},

	{"subscribe/no-filters", V311, []byte{0x82, 2, 0, 1}, ProtocolError, "MQTT-3.8.3-2"},
	{"subscribe/v5-no-filters", V5, []byte{0x82, 3, 0, 1, 0}, ProtocolError, "MQTT-3.8.3-2"},
	{"subscribe/packet-id-0", V311, []byte{0x82, 6, 0, 0, 0, 1, 'a', 0}, ProtocolError, "MQTT-2.2.1-3"},
	{"subscribe/reserved-bits-3.1.1", V311, []byte{0x82, 6, 0, 1, 0, 1, 'a', 0x04}, MalformedPacket, "MQTT-3.8.3-4"},
	{"subscribe/reserved-bits-v5", V5, []byte{0x82, 7, 0, 1, 0, 0, 1, 'a', 0x40}, MalformedPacket, "MQTT-3.8.3-5"},
	{"subscribe/qos3", V311, []byte{0x82, 6, 0, 1, 0, 1, 'a', 3}, MalformedPacket, "MQTT-3.8.3-4"},
	{"subscribe/retain-handling-3", V5, []byte{0x82, 7, 0, 1, 0, 0, 1, 'a', 0x30}, ProtocolError, "MQTT-3.8.3-5"},
	{"subscribe/hash-not-last", V311, []byte{0x82, 8, 0, 1, 0, 3, '#', '/', 'a', 0}, MalformedPacket, "MQTT-4.7.1-2"},
	{"subscribe/hash-in-level", V311, []byte{0x82, 7, 0, 1, 0, 2, 'a', '#', 0}, MalformedPacket, "MQTT-4.7.1-2"},
	{"subscribe/plus-in-level", V311, []byte{0x82, 8, 0, 1, 0, 3, 'a', '+', '/', 0}, MalformedPacket, "MQTT-4.7.1-3"},
	{"subscribe/empty-filter", V311, []byte{0x82, 5, 0, 1, 0, 0, 0}, MalformedPacket, "MQTT-4.7.3-1"},
	{"subscribe/share-without-filter", V5, []byte{0x82, 15, 0, 1, 0, 0, 9, '$', 's', 'h', 'a', 'r', 'e', '/', 'g', '/', 0}, MalformedPacket, "MQTT-4.8.2-2"},
	{"subscribe/share-name-wildcard", V5, []byte{0x82, 16, 0, 1, 0, 0, 10, '$', 's', 'h', 'a', 'r', 'e', '/', '+', '/', 'a', 0}, MalformedPacket, "MQTT-4.8.2-1"},
	{"subscribe/share-empty-name", V5, []byte{0x82, 15, 0, 1, 0, 0, 9, '$', 's', 'h', 'a', 'r', 'e', '/', '/', 'a', 0}, MalformedPacket, "MQTT-4.8.2-1"},
	{"subscribe/share-no-local", V5, []byte{0x82, 16, 0, 1, 0, 0, 10, '$', 's', 'h', 'a', 'r', 'e', '/', 'g', '/', 'a', 0x04}, ProtocolError, "MQTT-3.8.3-4"},
	{"subscribe/two-subscription-ids", V5, []byte{0x82, 11, 0, 1, 4, 0x0b, 1, 0x0b, 2, 0, 1, 'a', 0}, ProtocolError, "MQTT-2.2.2-2"},
	{"subscribe/missing-options", V311, []byte{0x82, 5, 0, 1, 0, 1, 'a'}, MalformedPacket, "MQTT-1.5"},

	{"unsubscribe/no-filters", V311, []byte{0xa2, 2, 0, 1}, ProtocolError, "MQTT-3.10.3-2"},
	{"unsubscribe/bad-filter", V311, []byte{0xa2, 5, 0, 1, 0, 1, 0}, MalformedPacket, "MQTT-1.5.4-1"},
	{"suback/code-3", V311, []byte{0x90, 3, 0, 1, 3}, MalformedPacket, "MQTT-3.9.3-2"},
	{"unsuback/v5-bad-code", V5, []byte{0xb0, 4, 0, 1, 0, 0x01}, MalformedPacket, "MQTT-3.11.3-2"},

	{"pingreq/body", V311, []byte{0xc0, 1, 0}, MalformedPacket, "MQTT-3.12"},
	{"disconnect/body-3.1.1", V311, []byte{0xe0, 1, 0}, MalformedPacket, "MQTT-3.14.1-1"},
	{"disconnect/v5-bad-code", V5, []byte{0xe0, 1, 0x01}, MalformedPacket, "MQTT-3.14.2-1"},
	{"disconnect/v5-trailing", V5, []byte{0xe0, 3, 0, 0, 9}, MalformedPacket, ""},
	{"auth/v5-bad-code", V5, []byte{0xf0, 1, 0x80}, MalformedPacket, "MQTT-3.15.2-1"},
}

func TestBadPackets(t *testing.T) {
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			raw := append([]byte(nil), tc.raw...)
			if len(raw) < 130 && raw[1] < 0x80 {
				// The remaining length is recomputed, so that each case tests its body.
				raw[1] = byte(len(raw) - 2)
			}
			h, n, err := ParseHeader(raw, tc.v)
			if err == nil {
				if n == 0 {
					t.Fatalf("header incomplete")
				}
				_, err = Decode(h, raw[n:h.Size()], tc.v)
			}
			if err == nil {
				t.Fatalf("decoded without error")
			}
			var rc ReasonCode
			if !errors.As(err, &rc) || rc != tc.code {
				t.Fatalf("error %v: reason code %#x, want %#x", err, byte(rc), byte(tc.code))
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Rule != tc.rule {
				t.Fatalf("error %v: want rule %q", err, tc.rule)
			}
		})
	}
}

// TestPublishFromClient: a PUBLISH with a subscription identifier decodes (a client
// receives such), but a server must refuse it from a client [MQTT-3.3.4-6].
func TestPublishFromClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		ok   bool
	}{
		{"plain", []byte{0x30, 4, 0, 1, 't', 0}, true},
		{"subscription-id", []byte{0x30, 6, 0, 1, 't', 2, 0x0b, 1}, false},
		{"two-subscription-ids", []byte{0x30, 8, 0, 1, 't', 4, 0x0b, 1, 0x0b, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := ParseHeader(tc.raw, V5)
			if err != nil {
				t.Fatal(err)
			}
			var p Publish
			if err := p.Decode(h, tc.raw[n:], V5); err != nil {
				t.Fatalf("decode: %v", err)
			}
			err = p.CheckFromClient()
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != ProtocolError || pe.Rule != "MQTT-3.3.4-6" {
				t.Fatalf("error %v, want a protocol error naming MQTT-3.3.4-6", err)
			}
		})
	}
}

// TestPayloadFormatAnyValue: every Payload Format Indicator value, in a PUBLISH and in a
// will, decodes, is kept, and is written back as it came: the spec makes no value an error
// (3.3.2.3.2, 3.1.3.2.3) and a server forwards it unaltered [MQTT-3.3.2-4].
func TestPayloadFormatAnyValue(t *testing.T) {
	for _, v := range []byte{0, 1, 2, 0x7f, 0x80, 0xff} {
		t.Run(fmt.Sprintf("publish/%d", v), func(t *testing.T) {
			raw := []byte{0x32, 9, 0, 1, 't', 0, 1, 2, 0x01, v, 'x'}
			h, n, err := ParseHeader(raw, V5)
			if err != nil {
				t.Fatal(err)
			}
			var p Publish
			if err := p.Decode(h, raw[n:], V5); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !p.Props.PayloadFormat.Set || p.Props.PayloadFormat.V != v {
				t.Fatalf("payload format %+v, want %d", p.Props.PayloadFormat, v)
			}
			if out := p.AppendTo(nil, V5); !bytes.Equal(out, raw) {
				t.Fatalf("written back as % x, want % x", out, raw)
			}
		})
		t.Run(fmt.Sprintf("will/%d", v), func(t *testing.T) {
			c := &Connect{Version: V5, ClientID: []byte("c"), CleanStart: true, WillFlag: true,
				WillTopic: []byte("w"), WillPayload: []byte("x"), WillProps: Properties{PayloadFormat: Some(v)}}
			raw := c.AppendTo(nil, V5)
			h, n, err := ParseHeader(raw, V5)
			if err != nil {
				t.Fatal(err)
			}
			var got Connect
			if err := got.Decode(h, raw[n:], V5); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !got.WillProps.PayloadFormat.Set || got.WillProps.PayloadFormat.V != v {
				t.Fatalf("will payload format %+v, want %d", got.WillProps.PayloadFormat, v)
			}
		})
	}
}

func TestValidUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", true}, {"a/b/c", true}, {"héllo/世界", true}, {"emoji/😀", true},
		{"\x00", false}, {"a\x01", false}, {"tab\t", false}, {"del\x7f", false},
		{"\u0085", false}, {"\ufdd0", false}, {"\uffff", false}, {"\U0001fffe", false},
		{"\xed\xa0\x80", false}, {"\xc0\xaf", false}, {"\xff", false}, {"\xe2\x82", false},
		{"\ufeff-bom-kept", true},
	} {
		if got := ValidUTF8([]byte(tc.in)); got != tc.want {
			t.Errorf("ValidUTF8(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestTopicFilters(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"#", true}, {"+", true}, {"a/#", true}, {"+/+/#", true}, {"/", true}, {"a//b", true},
		{"$SYS/#", true}, {"$share/g/#", true}, {"$share/g/a/+/c", true}, {"$share", false},
		{"$share/g", false}, {"$share/g/", false}, {"$share//a", false}, {"$share/g#/a", false},
		{"a#", false}, {"#/a", false}, {"a/#/b", false}, {"a+", false}, {"+a", false}, {"", false},
		{"$sharex/g/a", true},
	} {
		if err := ValidTopicFilter([]byte(tc.in)); (err == nil) != tc.ok {
			t.Errorf("ValidTopicFilter(%q) = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}
