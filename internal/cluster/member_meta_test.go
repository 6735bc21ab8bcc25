package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Protocol: protocolVersion, HasState: true, Leaving: true, RPC: "10.0.0.1:7947", MQTT: "10.0.0.1:1883",
		ClusterID: idA, Load: 0.4321, AuthDigest: "0123456789abcdef"}
	data := appendMeta(nil, m)
	got, err := decodeMeta(data)
	if err != nil {
		t.Fatal(err)
	}
	if got != m {
		t.Fatalf("decoded %+v\nwant    %+v", got, m)
	}
	// Compact: what memberlist carries in every alive message, far below its limit.
	if len(data) > 100 {
		t.Errorf("metadata is %d bytes; want at most 100 for these addresses", len(data))
	}
	full := appendMeta(nil, Meta{RPC: strings.Repeat("r", 225), MQTT: strings.Repeat("m", 225), ClusterID: idA, Load: 1,
		AuthDigest: strings.Repeat("d", authDigestLen)})
	if len(full) > memberlist.MetaMaxSize {
		t.Errorf("metadata with 225-byte addresses is %d bytes; memberlist carries %d", len(full), memberlist.MetaMaxSize)
	}
}

// TestMetaNewer: a newer node's metadata with fields appended reads up to what this build
// knows; another version or a cut one is refused.
func TestMetaNewer(t *testing.T) {
	m := Meta{Protocol: 3, RPC: "a:1", MQTT: "b:2", Load: 1, AuthDigest: "0123456789abcdef"}
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
	// A protocol 1 node's metadata ends after the load: it has no auth digest.
	v1 := Meta{Protocol: 1, RPC: "a:1", Load: 0.5}
	data = appendMeta(nil, v1)
	if got, err := decodeMeta(data[:len(data)-1]); err != nil || got != v1 {
		t.Fatalf("protocol 1 metadata: %+v, %v", got, err)
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
