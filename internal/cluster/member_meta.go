package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// protocolVersion is what this build speaks to other nodes: its gRPC service, its Raft
// commands. A command or call that needs a newer one is used only once every member
// advertises it. 2: auth files (fsm/auth.go); 3: claims with identities (fsm/owners.go).
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
// [auth digest], the load an unsigned varint and the strings prefixed with their length
// (a varint): the layout of the state machine's encoding (fsm/wire.go), a few dozen bytes.
func appendMeta(b []byte, m Meta) []byte {
	var flags byte
	if m.HasState {
		flags |= flagHasState
	}
	if m.Leaving {
		flags |= flagLeaving
	}
	b = append(b, metaVersion, m.Protocol, flags)
	b = appendMetaString(b, m.RPC)
	b = appendMetaString(b, m.MQTT)
	b = appendMetaString(b, m.ClusterID)
	b = binary.AppendUvarint(b, uint64(math.Round(min(max(m.Load, 0), 1)*10000)))
	return appendMetaString(b, m.AuthDigest)
}

func appendMetaString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeMeta reads another node's metadata, ignoring fields appended by newer versions.
func decodeMeta(data []byte) (Meta, error) {
	r := &metaReader{b: data, ok: true}
	if v := r.byte(); r.ok && v != metaVersion {
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
	if !r.ok {
		return Meta{}, errMetaShort
	}
	return m, nil
}

var errMetaShort = errors.New("cluster: node metadata: truncated encoding")

// A metaReader decodes what appendMeta wrote. The first problem sticks: later reads
// return zero values and ok stays false, so decodeMeta checks once at its end.
type metaReader struct {
	b  []byte
	ok bool
}

func (r *metaReader) byte() byte {
	if !r.ok || len(r.b) == 0 {
		r.ok = false
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *metaReader) uvarint() uint64 {
	if !r.ok {
		return 0
	}
	v, rest, ok := uvarint(r.b) // forward_frame.go
	r.b, r.ok = rest, ok
	return v
}

func (r *metaReader) string() string {
	n := r.uvarint()
	if !r.ok || n > uint64(len(r.b)) {
		r.ok = false
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
