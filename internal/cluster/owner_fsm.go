package cluster

import (
	"crypto/sha256"
	"fmt"
)

// Client-id ownership in the replicated state: client id → (owner node, epoch). A CONNECT
// on node B claims its client id for B (claims); the entry's previous owner, returned to
// B, is the node B asks for the session (handover.go), and every node applying the claim
// closes its own connection of that id if it is not the owner (the fence, owner.go). When
// a session ends its node releases the entry (releases), so the table holds the live and
// persistent sessions, not every client id ever seen.
//
// The epoch of a claim is the Raft index of the entry that made it: strictly greater than
// every earlier epoch, of any client id, without a counter per entry, and never reused, so
// that a release can name exactly the claim it ends (a release that reaches the log after
// the same node claimed the id again removes nothing).
//
// Memory: every node holds the whole table, an entry per session anywhere in the cluster,
// so an entry keeps no client id: its key is the id's ownerKey (12 bytes), its value the
// owner's number in the node table (16 bits) and the epoch (48 bits: 2.8e14 log entries)
// in two 32-bit halves, so that the map's slots are 20 bytes, not 24. The log entries carry the exact ids, so what acts on one connection (the
// fence, the hand-over) still names it exactly; the table only answers "who owns this
// id", and two ids share an entry only if SHA-256 collides in 96 bits. 1M entries: see
// BenchmarkOwnerTableBytes.

const (
	kindClaim   kind = 2 // claims: client ids for a node
	kindRelease kind = 3 // releases: client ids whose sessions ended
)

// Packing of an ownership entry into one word.
const (
	epochBits = 48
	epochMask = 1<<epochBits - 1
	maxNodes  = 1 << (64 - epochBits)
)

// An ownerKey is a client id's key in the table: the first 96 bits of its SHA-256, the
// same on every node and for every build (no seed), and not a hash a client could aim at
// another client's entry with (a second preimage is 2^96 tries; at 10M entries two ids
// share a key with odds of 1e-15).
type ownerKey [12]byte

func keyOf(cid string) ownerKey {
	h := sha256.Sum256([]byte(cid))
	return ownerKey(h[:12])
}

// An ownerVal is an entry's node number << epochBits | epoch, high half first.
type ownerVal [2]uint32

func packOwner(node uint64, epoch uint64) ownerVal {
	v := node<<epochBits | epoch
	return ownerVal{uint32(v >> 32), uint32(v)}
}

func (v ownerVal) node() uint64  { return uint64(v[0]) >> (epochBits - 32) }
func (v ownerVal) epoch() uint64 { return (uint64(v[0])<<32 | uint64(v[1])) & epochMask }

// owners is the ownership part of the state.
type owners struct {
	m       map[ownerKey]ownerVal
	nodes   []string // node number → name; append-only, small
	nodeIdx map[string]uint16
}

// nodeNum returns the number of node, adding it to the table.
func (o *owners) nodeNum(node string) (uint16, error) {
	if n, ok := o.nodeIdx[node]; ok {
		return n, nil
	}
	if len(o.nodes) >= maxNodes {
		return 0, fmt.Errorf("cluster: more than %d node names in the ownership table", maxNodes)
	}
	if o.nodeIdx == nil {
		o.nodeIdx = map[string]uint16{}
		o.m = map[ownerKey]ownerVal{}
	}
	n := uint16(len(o.nodes))
	o.nodes = append(o.nodes, node)
	o.nodeIdx[node] = n
	return n, nil
}

// get returns the owner and epoch of the client id of key k; "" when it has none.
func (o *owners) get(k ownerKey) (node string, epoch uint64) {
	v, ok := o.m[k]
	if !ok {
		return "", 0
	}
	return o.nodes[v.node()], v.epoch()
}

// claims gives client ids to a node. Its result is the epoch (the entry's index), then
// for each id, in order, the previous owner ("" for none) and its epoch. One entry holds
// the claims of many CONNECTs (owner.go batches them).
type claims struct {
	node string
	ids  []string
}

func (claims) kind() kind { return kindClaim }

func (c claims) appendBody(b []byte) []byte {
	b = appendString(b, c.node)
	b = appendUvarint(b, uint64(len(c.ids)))
	for _, id := range c.ids {
		b = appendString(b, id)
	}
	return b
}

// maxBatchIDs bounds the client ids of one claims or releases entry: a decoder allocates
// no more than this many up front.
const maxBatchIDs = 1 << 16

func decodeClaims(r *reader) command {
	c := claims{node: r.string()}
	n := r.uvarint()
	if n > maxBatchIDs {
		r.err = fmt.Errorf("cluster: %d client ids in one entry", n)
		return c
	}
	c.ids = make([]string, 0, n)
	for range n {
		c.ids = append(c.ids, r.string())
	}
	return c
}

func (c claims) apply(s *state, index uint64) ([]byte, error) {
	if c.node == "" {
		return nil, fmt.Errorf("cluster: a claim without a node")
	}
	if index > epochMask {
		return nil, fmt.Errorf("cluster: log index %d beyond the epoch's range", index)
	}
	n, err := s.owners.nodeNum(c.node)
	if err != nil {
		return nil, err
	}
	out := appendUvarint(make([]byte, 0, 8+len(c.ids)*4), index)
	v := packOwner(uint64(n), index)
	for _, id := range c.ids {
		k := keyOf(id)
		prev, epoch := s.owners.get(k)
		out = appendString(out, prev)
		out = appendUvarint(out, epoch)
		s.owners.m[k] = v
	}
	return out, nil
}

// A claimed is one client id's outcome of a claims entry.
type claimed struct {
	prev      string // the previous owner; "" for none
	prevEpoch uint64
}

// decodeClaimed reads a claims result for n ids.
func decodeClaimed(data []byte, n int) (epoch uint64, out []claimed, err error) {
	r := &reader{b: data}
	epoch = r.uvarint()
	out = make([]claimed, n)
	for i := range out {
		out[i].prev = r.string()
		out[i].prevEpoch = r.uvarint()
	}
	if err := r.end(); err != nil {
		return 0, nil, fmt.Errorf("cluster: claim result: %w", err)
	}
	return epoch, out, nil
}

// A release ends one claim: the client id, and the epoch it was claimed at.
type release struct {
	id    string
	epoch uint64
}

// releases removes the entries of sessions that ended on node, each only if it is still
// the claim named (same owner, same epoch). The result is how many were removed.
type releases struct {
	node string
	ids  []release
}

func (releases) kind() kind { return kindRelease }

func (c releases) appendBody(b []byte) []byte {
	b = appendString(b, c.node)
	b = appendUvarint(b, uint64(len(c.ids)))
	for _, r := range c.ids {
		b = appendString(b, r.id)
		b = appendUvarint(b, r.epoch)
	}
	return b
}

func decodeReleases(r *reader) command {
	c := releases{node: r.string()}
	n := r.uvarint()
	if n > maxBatchIDs {
		r.err = fmt.Errorf("cluster: %d client ids in one entry", n)
		return c
	}
	c.ids = make([]release, 0, n)
	for range n {
		c.ids = append(c.ids, release{id: r.string(), epoch: r.uvarint()})
	}
	return c
}

func (c releases) apply(s *state, _ uint64) ([]byte, error) {
	n, ok := s.owners.nodeIdx[c.node]
	removed := 0
	if !ok {
		return appendUvarint(nil, 0), nil
	}
	for _, r := range c.ids {
		k := keyOf(r.id)
		if v, ok := s.owners.m[k]; ok && r.epoch <= epochMask && v == packOwner(uint64(n), r.epoch) {
			delete(s.owners.m, k)
			removed++
		}
	}
	return appendUvarint(nil, uint64(removed)), nil
}

// captureOwners encodes the table at once (Persist runs beside later Applies, which
// change the map): [nodes][name]... [entries]([key: 12 bytes][node][epoch])..., about 16
// bytes per entry.
func captureOwners(s *state) func([]byte) []byte {
	o := &s.owners
	b := appendOwnerNodes(nil, o)
	b = appendUvarint(b, uint64(len(o.m)))
	for k, v := range o.m {
		b = append(b, k[:]...)
		b = appendUvarint(b, v.node())
		b = appendUvarint(b, v.epoch())
	}
	return func(out []byte) []byte { return append(out, b...) }
}

func appendOwnerNodes(b []byte, o *owners) []byte {
	b = appendUvarint(b, uint64(len(o.nodes)))
	for _, n := range o.nodes {
		b = appendString(b, n)
	}
	return b
}

// restoreOwners reads what captureOwners wrote.
func restoreOwners(s *state, r *reader) {
	restoreOwnersWith(s, r, func(r *reader) ownerKey {
		var k ownerKey
		if len(r.b) < len(k) {
			r.err = errShort
			return k
		}
		r.b = r.b[copy(k[:], r.b):]
		return k
	})
}

// restoreOwnerIDs reads the section of a version-1 snapshot, whose entries name their
// client ids: [entries]([id][node][epoch])....
func restoreOwnerIDs(s *state, r *reader) {
	restoreOwnersWith(s, r, func(r *reader) ownerKey { return keyOf(r.string()) })
}

// restoreOwnersWith reads an ownership section whose entries start with what key reads.
func restoreOwnersWith(s *state, r *reader, key func(r *reader) ownerKey) {
	o := owners{}
	nodes := r.uvarint()
	if nodes > maxNodes {
		r.err = fmt.Errorf("cluster: %d node names in the ownership table", nodes)
		return
	}
	for range nodes {
		if _, err := o.nodeNum(r.string()); err != nil && r.err == nil {
			r.err = err
		}
	}
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every entry takes 3 bytes at least
		r.err = errShort
		return
	}
	o.m = make(map[ownerKey]ownerVal, n)
	for range n {
		k, node, epoch := key(r), r.uvarint(), r.uvarint()
		if r.err != nil {
			return
		}
		if node >= uint64(len(o.nodes)) || epoch > epochMask {
			r.err = fmt.Errorf("cluster: ownership entry %x: node %d, epoch %d", k, node, epoch)
			return
		}
		o.m[k] = packOwner(node, epoch)
	}
	s.owners = o
}

// An ownerCommand changes the ownership table: FSM.Apply holds omu for it.
type ownerCommand interface{ ownerCommand() }

func (claims) ownerCommand()   {}
func (releases) ownerCommand() {}

// Owner returns the owner of client id cid and its epoch as the applied log says; "" when
// it has none. It takes omu, not the FSM's lock: the broker asks it under its own lock,
// which an Apply holding the FSM's lock may wait for (a retained message's commit).
func (f *FSM) Owner(cid string) (node string, epoch uint64) {
	k := keyOf(cid)
	f.omu.RLock()
	defer f.omu.RUnlock()
	return f.s.owners.get(k)
}

// Owners returns the number of ownership entries.
func (f *FSM) Owners() int {
	f.omu.RLock()
	defer f.omu.RUnlock()
	return len(f.s.owners.m)
}

// ownedBy returns how many client ids node owns; for tests and diagnostics (the table
// keeps no ids: a node's broker knows its own clients).
func (f *FSM) ownedBy(node string) int {
	f.omu.RLock()
	defer f.omu.RUnlock()
	o := &f.s.owners
	n, ok := o.nodeIdx[node]
	if !ok {
		return 0
	}
	count := 0
	for _, v := range o.m {
		if v.node() == uint64(n) {
			count++
		}
	}
	return count
}
