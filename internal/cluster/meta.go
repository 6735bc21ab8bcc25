package cluster

import (
	"fmt"
	"math"
)

// protocolVersion is what this build speaks to other nodes: its gRPC service, its Raft
// commands. A command or call that needs a newer one is used only once every member
// advertises it. 2: auth files (fsm_auth.go); 3: claims with identities (owner_fsm.go).
const protocolVersion = 3

// metaVersion is the first byte of the metadata encoding. Fields are appended, never
// reordered, so a node reads a newer node's metadata up to what it knows and ignores the
// rest; a change that cannot be read that way takes a new version.
const metaVersion = 1

// Meta is what a node tells every other through gossip (memberlist's node metadata,
// refreshed with UpdateNode): how to reach it and what it is. Its name is memberlist's
// Node.Name, also its Raft server id.
type Meta struct {
	Protocol  uint8   // protocolVersion of the node's build
	HasState  bool    // the node has Raft state, so it never bootstraps a cluster
	Leaving   bool    // the node is closing: the leader removes it from the Raft configuration
	RPC       string  // its gRPC and Raft address, as peers dial it
	MQTT      string  // its MQTT address, for clients redirected there
	ClusterID string  // its cluster's id; "" until known
	Load      float64 // its load figure, 0 to 1 (metrics.Load), in steps of 1/10000
	// AuthDigest is auth.Digest of the auth files the node enforces; "" for none.
	AuthDigest string
}

// authDigestLen is the length of an auth.Digest.
const authDigestLen = 16

const (
	flagHasState = 1 << iota
	flagLeaving
)

// appendMeta encodes m: [version][protocol][flags][rpc][mqtt][cluster id][load×10000]
// [auth digest].
func appendMeta(b []byte, m Meta) []byte {
	var flags byte
	if m.HasState {
		flags |= flagHasState
	}
	if m.Leaving {
		flags |= flagLeaving
	}
	b = append(b, metaVersion, m.Protocol, flags)
	b = appendString(b, m.RPC)
	b = appendString(b, m.MQTT)
	b = appendString(b, m.ClusterID)
	b = appendUvarint(b, uint64(math.Round(min(max(m.Load, 0), 1)*10000)))
	return appendString(b, m.AuthDigest)
}

// decodeMeta reads another node's metadata, ignoring fields appended by newer versions.
func decodeMeta(data []byte) (Meta, error) {
	r := &reader{b: data}
	if v := r.byte(); r.err == nil && v != metaVersion {
		return Meta{}, fmt.Errorf("cluster: node metadata version %d; this build reads %d", v, metaVersion)
	}
	var m Meta
	m.Protocol = r.byte()
	flags := r.byte()
	m.HasState, m.Leaving = flags&flagHasState != 0, flags&flagLeaving != 0
	m.RPC = r.string()
	m.MQTT = r.string()
	m.ClusterID = r.string()
	m.Load = float64(r.uvarint()) / 10000
	if len(r.b) > 0 { // appended by protocol 2
		m.AuthDigest = r.string()
	}
	if r.err != nil {
		return Meta{}, fmt.Errorf("cluster: node metadata: %w", r.err)
	}
	return m, nil
}
