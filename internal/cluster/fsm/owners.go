package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Client-id ownership in the replicated state: client id → (owner node, epoch, owner
// identity). A CONNECT on node B claims its client id for B (Claims); the entry's previous
// owner, returned to B, is the node B asks for the session (owner_handover.go; the files named
// here without a package are internal/cluster's), and every node
// applying the claim closes its own connection of that id if it is not the owner (the
// fence, owner.go). When a session ends its node releases the entry (Releases), so the
// table holds the live and persistent sessions, not every client id ever seen.
//
// The epoch of a claim is the Raft index of the entry that made it: strictly greater than
// every earlier epoch, of any client id, without a counter per entry, and never reused, so
// that a release can name exactly the claim it ends (a release that reaches the log after
// the same node claimed the id again removes nothing).
//
// The identity is whose session the entry's node holds (internal/broker, identity.go), as
// a 24-bit digest, or whoUnknown. A claim under foreign_session: refuse that finds the id
// owned by another identity takes nothing: no fence, no hand-over, and its CONNECT is
// refused (ClaimAs.settle). A claim records its CONNECT's identity only where the session
// cannot stay another's if the CONNECT fails after the claim, and whoUnknown otherwise,
// which never refuses anyone: then the hand-over brings the session and the broker
// compares the identities from the session itself. Two identities share a digest
// with odds of 2^-24, and then a CONNECT of one closes the other's connection before it is
// refused, the same way. A CONNECT that attaches under a claim that left its entry unknown
// names its identity afterwards (Attaches, batched and lazy as releases are): so an entry
// of an older log or snapshot, or of a session taken over whole, is known from its
// owner's next CONNECT on.
//
// Memory: every node holds the whole table, an entry per session anywhere in the cluster,
// so an entry keeps no client id: its key is the id's ownerKey (12 bytes), its value the
// owner's number in the node table (16 bits) and the epoch (48 bits: 2.8e14 log entries)
// in 8 bytes, and the identity's digest in 3: all bytes, so that the map's slots are 23
// bytes, and a table's 1,024 slots fill a 24 KiB allocation exactly (24-byte slots would
// take the next size class, 26.6 KiB; the digest's fourth byte is not worth it).
// The log entries carry the exact ids, so what acts on one connection (the fence, the
// hand-over) still names it exactly; the table only answers "who owns this id", and two
// ids share an entry only if SHA-256 collides in 96 bits. 1M entries: see
// BenchmarkOwnerTableBytes.

const (
	kindClaim   kind = 2 // Claims: client ids for a node
	kindRelease kind = 3 // Releases: client ids whose sessions ended
	kindClaimAs kind = 6 // Claims with their CONNECTs' identities (protocol 3)
	kindAttach  kind = 7 // Attaches: the identities of sessions whose claims left them unknown
)

// Packing of an ownership entry's node and epoch into one word.
const (
	epochBits = 48
	epochMask = 1<<epochBits - 1
	maxNodes  = 1 << (64 - epochBits)
)

// whoUnknown is the identity of an entry whose owner is not known: claimed by a node of
// an older build, restored from an older snapshot, or left so by a claim (see above).
const whoUnknown = 0

// whoBits is the width of an identity's digest.
const whoBits = 24

// WhoOf is the digest of identity, the broker's name of one (broker.Claimant.Identity):
// the first 24 bits of its SHA-256, the same on every node and in every build, never
// whoUnknown.
func WhoOf(identity string) uint32 {
	h := sha256.Sum256([]byte(identity))
	if w := uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2]); w != whoUnknown {
		return w
	}
	return 1
}

// An ownerKey is a client id's key in the table: the first 96 bits of its SHA-256, the
// same on every node and for every build (no seed), and not a hash a client could aim at
// another client's entry with (a second preimage is 2^96 tries; at 10M entries two ids
// share a key with odds of 1e-15).
type ownerKey [12]byte

func keyOf(cid string) ownerKey {
	h := sha256.Sum256([]byte(cid))
	return ownerKey(h[:12])
}

// An ownerVal is an entry's node number << epochBits | epoch, then the owner's identity,
// big-endian.
type ownerVal [8 + whoBits/8]byte

func packOwner(node, epoch uint64, who uint32) ownerVal {
	var v ownerVal
	binary.BigEndian.PutUint64(v[:8], node<<epochBits|epoch)
	v[8], v[9], v[10] = byte(who>>16), byte(who>>8), byte(who)
	return v
}

func (v ownerVal) node() uint64  { return binary.BigEndian.Uint64(v[:8]) >> epochBits }
func (v ownerVal) epoch() uint64 { return binary.BigEndian.Uint64(v[:8]) & epochMask }
func (v ownerVal) who() uint32   { return uint32(v[8])<<16 | uint32(v[9])<<8 | uint32(v[10]) }

// claimOf reports whether v is the claim of node number n at epoch.
func (v ownerVal) claimOf(n, epoch uint64) bool { return v.node() == n && v.epoch() == epoch }

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

// Claims gives client ids to a node. Its result is the epoch (the entry's index), then
// for each id, in order, the previous owner ("" for none) and its epoch, and, with
// identities, the outcome's flags (claimForeign, claimNamed); DecodeClaimed reads it. One
// entry holds the claims of many CONNECTs (internal/cluster's owner.go batches them).
type Claims struct {
	Node string   // the claiming node
	IDs  []string // the client ids, at most MaxBatchIDs
	// As are the ids' claimants, one each (kindClaimAs); nil in an entry of an older
	// build (kindClaim), whose claims leave their entries' identities unknown.
	As []ClaimAs
}

// A ClaimAs is one CONNECT's part of a claim: its identity and what it may take.
type ClaimAs struct {
	Who  uint32 // WhoOf its identity; never 0 (whoUnknown)
	Mode ClaimMode
}

// A ClaimMode is what a claim does with an entry of another identity, as the CONNECT's
// foreign_session and clean start decide.
type ClaimMode uint8

const (
	// TakeDropped takes it, and the previous owner node drops the session without
	// sending it (a clean start under discard): none of the old identity is left there.
	TakeDropped ClaimMode = iota
	// TakeMoved takes it, and the session comes whole; the CONNECT discards it if it is
	// another identity's (discard).
	TakeMoved
	// TakeUnlessForeign takes it unless the entry names another identity (refuse): the
	// claim is then refused and the entry left as it is.
	TakeUnlessForeign
	maxClaimMode = TakeUnlessForeign
)

// The flags of one id's outcome in the result of a claims entry with identities.
const (
	claimForeign byte = 1 << iota // refused: the entry names another identity
	claimNamed                    // the entry names the claimant's identity now
)

// settle decides a claim on an id whose entry is old (had: there is one; same: its node
// is the claimant's): the identity the entry gets, or foreign: the claim is refused and
// the entry unchanged. The entry names the claimant where the session cannot stay
// another identity's even if the CONNECT fails after the claim (the broker then releases
// an entry it named without cause: cluster_owner.go, unsettledLocked); elsewhere it is
// left unknown.
func (a ClaimAs) settle(old ownerVal, had, same bool) (who uint32, foreign bool) {
	switch {
	case !had || old.who() == a.Who:
		return a.Who, false
	case a.Mode == TakeUnlessForeign && old.who() != whoUnknown:
		return 0, true
	case a.Mode == TakeDropped && !same:
		// The previous owner drops its session; one on the claimant's node stays until
		// the CONNECT attaches.
		return a.Who, false
	}
	return whoUnknown, false
}

func (c Claims) kind() kind {
	if c.As != nil {
		return kindClaimAs
	}
	return kindClaim
}

func (c Claims) appendBody(b []byte) []byte {
	b = appendString(b, c.Node)
	b = appendUvarint(b, uint64(len(c.IDs)))
	for i, id := range c.IDs {
		b = appendString(b, id)
		if c.As != nil {
			b = appendUvarint(b, uint64(c.As[i].Who)<<2|uint64(c.As[i].Mode))
		}
	}
	return b
}

// MaxBatchIDs bounds the client ids of one Claims, Releases or Attaches entry: a decoder
// allocates no more than this many up front, and refuses an entry with more.
const MaxBatchIDs = 1 << 16

func decodeClaims(r *reader) Command { return decodeClaimsWith(r, false) }

func decodeClaimsAs(r *reader) Command { return decodeClaimsWith(r, true) }

func decodeClaimsWith(r *reader, as bool) Command {
	c := Claims{Node: r.string()}
	n := r.uvarint()
	if n > MaxBatchIDs {
		r.err = fmt.Errorf("cluster: %d client ids in one entry", n)
		return c
	}
	c.IDs = make([]string, 0, n)
	if as {
		c.As = make([]ClaimAs, 0, n)
	}
	for range n {
		c.IDs = append(c.IDs, r.string())
		if !as {
			continue
		}
		v := r.uvarint()
		a := ClaimAs{Who: uint32(v >> 2), Mode: ClaimMode(v & 3)}
		if v>>2 >= 1<<whoBits || a.Who == whoUnknown || a.Mode > maxClaimMode {
			if r.err == nil {
				r.err = fmt.Errorf("cluster: claim %q: identity %#x", c.IDs[len(c.IDs)-1], v)
			}
			return c
		}
		c.As = append(c.As, a)
	}
	return c
}

func (c Claims) apply(s *state, index uint64) ([]byte, error) {
	if c.Node == "" {
		return nil, fmt.Errorf("cluster: a claim without a node")
	}
	if index > epochMask {
		return nil, fmt.Errorf("cluster: log index %d beyond the epoch's range", index)
	}
	n, err := s.owners.nodeNum(c.Node)
	if err != nil {
		return nil, err
	}
	out := appendUvarint(make([]byte, 0, 8+len(c.IDs)*5), index)
	for i, id := range c.IDs {
		k := keyOf(id)
		old, had := s.owners.m[k]
		prev, epoch := "", uint64(0)
		if had {
			prev, epoch = s.owners.nodes[old.node()], old.epoch()
		}
		who, foreign := uint32(whoUnknown), false
		if c.As != nil {
			who, foreign = c.As[i].settle(old, had, had && old.node() == uint64(n))
		}
		if foreign {
			prev, epoch = "", 0
		}
		out = appendString(out, prev)
		out = appendUvarint(out, epoch)
		if c.As != nil {
			var f byte
			switch {
			case foreign:
				f = claimForeign
			case who == c.As[i].Who:
				f = claimNamed
			}
			out = append(out, f)
		}
		if !foreign {
			s.owners.m[k] = packOwner(uint64(n), index, who)
		}
	}
	return out, nil
}

// A Claimed is one client id's outcome of a Claims entry (DecodeClaimed).
type Claimed struct {
	Prev      string // the previous owner; "" for none, and for a claim refused
	PrevEpoch uint64 // the epoch of Prev's claim
	Foreign   bool   // refused: another identity owns the id (claimForeign)
	Named     bool   // the entry names the claimant's identity (claimNamed)
}

// DecodeClaimed reads the result of a Claims entry of n ids; as: the entry had
// identities (Claims.As set).
func DecodeClaimed(data []byte, n int, as bool) (epoch uint64, out []Claimed, err error) {
	r := &reader{b: data}
	epoch = r.uvarint()
	out = make([]Claimed, n)
	for i := range out {
		out[i].Prev = r.string()
		out[i].PrevEpoch = r.uvarint()
		if as {
			f := r.byte()
			out[i].Foreign, out[i].Named = f&claimForeign != 0, f&claimNamed != 0
		}
	}
	if err := r.end(); err != nil {
		return 0, nil, fmt.Errorf("cluster: claim result: %w", err)
	}
	return epoch, out, nil
}

// Taken returns the ids of c its result says were taken: all of them but those refused.
// It allocates only when one was refused: every node asks it of every Claims entry
// (internal/cluster fences the connections of the ids another node took).
func (c Claims) Taken(result []byte) []string {
	if c.As == nil {
		return c.IDs
	}
	r := &reader{b: result}
	r.uvarint() // the epoch
	var out []string
	for i := range c.IDs {
		if n := r.uvarint(); n <= uint64(len(r.b)) {
			r.b = r.b[n:] // the previous owner, unread
		} else {
			r.err = errShort
		}
		r.uvarint()
		switch foreign := r.byte()&claimForeign != 0; {
		case foreign && out == nil:
			out = append(make([]string, 0, len(c.IDs)-1), c.IDs[:i]...)
		case !foreign && out != nil:
			out = append(out, c.IDs[i])
		}
	}
	if r.end() != nil || out == nil {
		return c.IDs
	}
	return out
}

// A Release ends one claim: the client id, and the epoch it was claimed at.
type Release struct {
	ID    string
	Epoch uint64
}

// Releases removes the entries of sessions that ended on node, each only if it is still
// the claim named (same owner, same epoch). The result is how many were removed.
type Releases struct {
	Node string
	IDs  []Release // at most MaxBatchIDs
}

func (Releases) kind() kind { return kindRelease }

func (c Releases) appendBody(b []byte) []byte {
	b = appendString(b, c.Node)
	b = appendUvarint(b, uint64(len(c.IDs)))
	for _, r := range c.IDs {
		b = appendString(b, r.ID)
		b = appendUvarint(b, r.Epoch)
	}
	return b
}

func decodeReleases(r *reader) Command {
	c := Releases{Node: r.string()}
	n := r.uvarint()
	if n > MaxBatchIDs {
		r.err = fmt.Errorf("cluster: %d client ids in one entry", n)
		return c
	}
	c.IDs = make([]Release, 0, n)
	for range n {
		c.IDs = append(c.IDs, Release{ID: r.string(), Epoch: r.uvarint()})
	}
	return c
}

func (c Releases) apply(s *state, _ uint64) ([]byte, error) {
	n, ok := s.owners.nodeIdx[c.Node]
	removed := 0
	if !ok {
		return appendUvarint(nil, 0), nil
	}
	for _, r := range c.IDs {
		k := keyOf(r.ID)
		if v, ok := s.owners.m[k]; ok && v.claimOf(uint64(n), r.Epoch) {
			delete(s.owners.m, k)
			removed++
		}
	}
	return appendUvarint(nil, uint64(removed)), nil
}

// captureOwners encodes the table at once (Persist runs beside later Applies, which
// change the map): [nodes][name]... [entries]([key: 12 bytes][node][epoch][who: 3
// bytes])..., about 19 bytes per entry.
func captureOwners(s *state) func([]byte) []byte {
	o := &s.owners
	b := appendOwnerNodes(nil, o)
	b = appendUvarint(b, uint64(len(o.m)))
	for k, v := range o.m {
		b = append(b, k[:]...)
		b = appendUvarint(b, v.node())
		b = appendUvarint(b, v.epoch())
		b = append(b, v[8:]...)
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
func restoreOwners(s *state, r *reader) { restoreOwnersWith(s, r, readOwnerKey, readWho) }

// restoreOlderOwners reads the section of an older snapshot, whose entries have no
// identity (they restore as whoUnknown): version 2 ([key][node][epoch]...) and version 1,
// whose entries name their client ids ([id][node][epoch]...).
func restoreOlderOwners(s *state, r *reader, version byte) {
	key := readOwnerKey
	if version == 1 {
		key = func(r *reader) ownerKey { return keyOf(r.string()) }
	}
	restoreOwnersWith(s, r, key, func(*reader) uint32 { return whoUnknown })
}

func readOwnerKey(r *reader) ownerKey {
	var k ownerKey
	if r.err == nil && len(r.b) < len(k) {
		r.err = errShort
	}
	if r.err != nil {
		return k
	}
	r.b = r.b[copy(k[:], r.b):]
	return k
}

func readWho(r *reader) uint32 {
	if r.err == nil && len(r.b) < whoBits/8 {
		r.err = errShort
	}
	if r.err != nil {
		return 0
	}
	w := uint32(r.b[0])<<16 | uint32(r.b[1])<<8 | uint32(r.b[2])
	r.b = r.b[whoBits/8:]
	return w
}

// restoreOwnersWith reads an ownership section whose entries start with what key reads
// and end with what who reads.
func restoreOwnersWith(s *state, r *reader, key func(r *reader) ownerKey, who func(r *reader) uint32) {
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
		w := who(r)
		if r.err != nil {
			return
		}
		if node >= uint64(len(o.nodes)) || epoch > epochMask {
			r.err = fmt.Errorf("cluster: ownership entry %x: node %d, epoch %d", k, node, epoch)
			return
		}
		o.m[k] = packOwner(node, epoch, w)
	}
	s.owners = o
}

// An Attach names the identity of the session a CONNECT attached to under the claim of
// its client id at epoch.
type Attach struct {
	ID    string
	Epoch uint64
	Who   uint32 // WhoOf the session's identity; never 0 (whoUnknown)
}

// Attaches sets the identities of entries of node's claims, each only if it is still the
// claim named: a later claim's entry has its own. The result is how many changed.
type Attaches struct {
	Node string
	IDs  []Attach // at most MaxBatchIDs
}

func (Attaches) kind() kind { return kindAttach }

func (c Attaches) appendBody(b []byte) []byte {
	b = appendString(b, c.Node)
	b = appendUvarint(b, uint64(len(c.IDs)))
	for _, a := range c.IDs {
		b = appendString(b, a.ID)
		b = appendUvarint(b, a.Epoch)
		b = appendUvarint(b, uint64(a.Who))
	}
	return b
}

func decodeAttaches(r *reader) Command {
	c := Attaches{Node: r.string()}
	n := r.uvarint()
	if n > MaxBatchIDs {
		r.err = fmt.Errorf("cluster: %d client ids in one entry", n)
		return c
	}
	c.IDs = make([]Attach, 0, n)
	for range n {
		a := Attach{ID: r.string(), Epoch: r.uvarint()}
		who := r.uvarint()
		if who >= 1<<whoBits || who == whoUnknown {
			if r.err == nil {
				r.err = fmt.Errorf("cluster: attach of %q: identity %#x", a.ID, who)
			}
			return c
		}
		a.Who = uint32(who)
		c.IDs = append(c.IDs, a)
	}
	return c
}

func (c Attaches) apply(s *state, _ uint64) ([]byte, error) {
	n, ok := s.owners.nodeIdx[c.Node]
	changed := 0
	if !ok {
		return appendUvarint(nil, 0), nil
	}
	for _, a := range c.IDs {
		k := keyOf(a.ID)
		if v, ok := s.owners.m[k]; ok && v.claimOf(uint64(n), a.Epoch) && v.who() != a.Who {
			s.owners.m[k] = packOwner(uint64(n), a.Epoch, a.Who)
			changed++
		}
	}
	return appendUvarint(nil, uint64(changed)), nil
}

// An ownerCommand changes the ownership table: FSM.Apply holds omu for it.
type ownerCommand interface{ ownerCommand() }

func (Claims) ownerCommand()   {}
func (Releases) ownerCommand() {}
func (Attaches) ownerCommand() {}

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
