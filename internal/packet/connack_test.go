package packet

import (
	"reflect"
	"testing"
)

// TestConnackFit: a CONNACK above the client's Maximum Packet Size loses first the
// properties that state their default, then the reason string and user properties
// [MQTT-3.2.2-19], [MQTT-3.2.2-20], then response information and server reference, and
// only as many as it must; what the client cannot do without stays, and a CONNACK that
// does not fit with it is reported.
func TestConnackFit(t *testing.T) {
	full := func() *Connack {
		return &Connack{Props: Properties{
			AssignedClientID:     []byte("bifrost-0123456789abcdef"),
			ReasonString:         []byte("welcome"),
			User:                 []UserProperty{{Key: []byte("k"), Value: []byte("v")}},
			ResponseInfo:         []byte("resp/"),
			ServerReference:      []byte("other:1883"),
			ReceiveMaximum:       Some[uint16](65535),
			TopicAliasMaximum:    Some[uint16](0),
			MaximumQoS:           Some[uint8](2),
			RetainAvailable:      Some[uint8](1),
			WildcardSubAvailable: Some[uint8](1),
			SubIDAvailable:       Some[uint8](1),
			SharedSubAvailable:   Some[uint8](1),
			MaximumPacketSize:    Some[uint32](1 << 20),
		}}
	}
	essential := func() *Connack {
		return &Connack{Props: Properties{AssignedClientID: []byte("bifrost-0123456789abcdef"),
			MaximumPacketSize: Some[uint32](1 << 20)}}
	}
	size := func(c *Connack) uint32 { return uint32(c.Size(V5)) }
	defaultsGone := full()
	defaultsGone.Props.ReceiveMaximum = Opt[uint16]{}
	defaultsGone.Props.TopicAliasMaximum = Opt[uint16]{}
	defaultsGone.Props.MaximumQoS = Opt[uint8]{}
	defaultsGone.Props.RetainAvailable = Opt[uint8]{}
	defaultsGone.Props.WildcardSubAvailable = Opt[uint8]{}
	defaultsGone.Props.SubIDAvailable = Opt[uint8]{}
	defaultsGone.Props.SharedSubAvailable = Opt[uint8]{}
	reasonGone := *defaultsGone
	reasonGone.Props.ReasonString = nil
	userGone := reasonGone
	userGone.Props.User = nil

	for _, tc := range []struct {
		name string
		max  uint32
		want *Connack
		fits bool
	}{
		{"no-limit", 0, full(), true},
		{"large-enough", size(full()), full(), true},
		{"defaults-dropped", size(defaultsGone), defaultsGone, true},
		{"reason-string-dropped", size(&reasonGone), &reasonGone, true},
		{"user-properties-dropped", size(&userGone), &userGone, true},
		{"only-essential", size(essential()), essential(), true},
		{"too-small", size(essential()) - 1, essential(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := full()
			if got := c.Fit(tc.max); got != tc.fits {
				t.Fatalf("Fit(%d) = %v, want %v", tc.max, got, tc.fits)
			}
			if !reflect.DeepEqual(c, tc.want) {
				t.Fatalf("after Fit(%d): %+v, want %+v", tc.max, c.Props, tc.want.Props)
			}
			if tc.fits && tc.max != 0 && size(c) > tc.max {
				t.Fatalf("%d bytes, above %d", size(c), tc.max)
			}
		})
	}

	// A property that limits the client is never dropped, however small the maximum.
	limits := &Connack{Props: Properties{ReceiveMaximum: Some[uint16](10), TopicAliasMaximum: Some[uint16](5),
		MaximumQoS: Some[uint8](1), RetainAvailable: Some[uint8](0), WildcardSubAvailable: Some[uint8](0)}}
	want := *limits
	if limits.Fit(5) || !reflect.DeepEqual(*limits, want) {
		t.Fatalf("limits changed: %+v", limits.Props)
	}
}
