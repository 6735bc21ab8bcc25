package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Protocol: protocolVersion, HasState: true, Leaving: true, RPC: "10.0.0.1:7947", MQTT: "10.0.0.1:1883",
		ClusterID: idA, Load: 0.4321}
	data := appendMeta(nil, m)
	got, err := decodeMeta(data)
	if err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Fatalf("decoded %+v\nwant    %+v", got, m)
	}
	// Compact: what memberlist carries in every alive message, far below its limit.
	if len(data) > 80 {
		t.Errorf("metadata is %d bytes; want at most 80 for these addresses", len(data))
	}
	full := appendMeta(nil, Meta{RPC: strings.Repeat("r", 230), MQTT: strings.Repeat("m", 230), ClusterID: idA, Load: 1})
	if len(full) > memberlist.MetaMaxSize {
		t.Errorf("metadata with 230-byte addresses is %d bytes; memberlist carries %d", len(full), memberlist.MetaMaxSize)
	}
}

// TestMetaNewer: a newer node's metadata with fields appended reads up to what this build
// knows; another version or a cut one is refused.
func TestMetaNewer(t *testing.T) {
	m := Meta{Protocol: 2, RPC: "a:1", MQTT: "b:2", Load: 1}
	got, err := decodeMeta(append(appendMeta(nil, m), 7, 7, 7))
	if err != nil || got != m {
		t.Fatalf("with appended fields: %+v, %v", got, err)
	}
	bad := appendMeta(nil, m)
	bad[0] = metaVersion + 1
	if _, err := decodeMeta(bad); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("another version: %v", err)
	}
	data := appendMeta(nil, m)
	if _, err := decodeMeta(data[:len(data)-1]); err == nil {
		t.Fatal("a cut encoding decoded")
	}
	if _, err := decodeMeta(nil); err == nil {
		t.Fatal("no metadata decoded")
	}
}

func TestMetaLoadClamped(t *testing.T) {
	for in, want := range map[float64]float64{-1: 0, 0: 0, 0.00004: 0, 0.99995: 1, 2: 1} {
		got, err := decodeMeta(appendMeta(nil, Meta{Load: in}))
		if err != nil || got.Load != want {
			t.Errorf("load %v: decoded %v, %v; want %v", in, got.Load, err, want)
		}
	}
}
