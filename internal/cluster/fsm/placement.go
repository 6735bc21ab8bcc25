package fsm

import (
	"fmt"
	"slices"
)

// Shard placement: which nodes hold each shard of the persistent sessions. Client ids hash
// to a fixed number of shards (ShardOf), and each shard is a Raft group of its own whose
// voters this table names (docs/cluster-sessions.md). The count and the number of replicas
// are chosen once, by the first Shards entry the first leader writes; the leader then
// writes Places entries as members come and go (PlanPlacement), and each shard's own
// leader, once its Raft configuration matches, writes ShardReady. The table is the
// target; the shard groups follow it one voter at a time.
//
// A Shards entry: [count][replicas]. A Places entry: [n] then n times
// [shard][epoch][m][m voters], each voter a length-prefixed node name; a place applies only
// when epoch is the shard's epoch (compare-and-set, so that a leader planning from a stale
// table changes nothing). A ShardReady entry: [shard][epoch].
//
// The snapshot section: [count][replicas][n] then n times
// [epoch][ready][m][m voters].

const (
	kindShards     kind = 8  // Shards: the shard count and replicas, chosen once
	kindPlaces     kind = 9  // Places: new voters for shards
	kindShardReady kind = 10 // ShardReady: a shard's Raft configuration matches its place
)

// Bounds of the shard table.
const (
	// MaxShards is the most shards a cluster may have: shard ids are uint16 on the wire
	// (the rpc port's shard prefix) and each shard a Raft instance on its nodes.
	MaxShards = 1024
	// MaxReplicas is the most voters a shard may have.
	MaxReplicas = 7
)

// A ShardPlace is one shard's target: its voters and the epoch that set them.
type ShardPlace struct {
	// Voters are node names, sorted; nil before the shard is first placed.
	Voters []string
	// Epoch is the log index of the Places entry that set Voters; 0 before.
	Epoch uint64
	// Ready is the latest epoch whose voters the shard's Raft configuration was seen to
	// match by its leader (ShardReady); a planner moves a shard only once Ready == Epoch.
	Ready uint64
}

// placement is the shard table.
type placement struct {
	replicas int          // voters per shard; 0 until chosen
	shards   []ShardPlace // by shard id; len is the count, 0 until chosen
}

// Shards chooses the shard count and the replicas per shard, once; a later entry changes
// nothing. Its result is the count and replicas in force, as two uvarints.
type Shards struct {
	Count    int // 1..MaxShards
	Replicas int // 1..MaxReplicas
}

func (Shards) kind() kind { return kindShards }

func (c Shards) appendBody(b []byte) []byte {
	return appendUvarint(appendUvarint(b, uint64(c.Count)), uint64(c.Replicas))
}

func decodeShards(r *reader) Command {
	return Shards{Count: int(r.uvarint()), Replicas: int(r.uvarint())}
}

func (c Shards) apply(s *state, _ uint64) ([]byte, error) {
	if c.Count < 1 || c.Count > MaxShards || c.Replicas < 1 || c.Replicas > MaxReplicas {
		return nil, fmt.Errorf("cluster: %d shards of %d replicas (want 1-%d shards, 1-%d replicas)", c.Count, c.Replicas, MaxShards, MaxReplicas)
	}
	p := &s.placement
	if len(p.shards) == 0 {
		p.shards = make([]ShardPlace, c.Count)
		p.replicas = c.Replicas
	}
	return appendUvarint(appendUvarint(nil, uint64(len(p.shards))), uint64(p.replicas)), nil
}

// A Place sets a shard's voters, if its epoch is still Epoch.
type Place struct {
	Shard  int
	Epoch  uint64   // the shard's epoch the planner saw
	Voters []string // distinct node names
}

// Places sets shards' voters. Each place applies alone: one whose epoch is stale, or whose
// voters are not 1 to the replicas distinct names, changes nothing. Its result is, per
// place, 1 if it applied and 0 if not.
type Places []Place

func (Places) kind() kind { return kindPlaces }

func (c Places) appendBody(b []byte) []byte {
	b = appendUvarint(b, uint64(len(c)))
	for _, p := range c {
		b = appendUvarint(b, uint64(p.Shard))
		b = appendUvarint(b, p.Epoch)
		b = appendUvarint(b, uint64(len(p.Voters)))
		for _, v := range p.Voters {
			b = appendString(b, v)
		}
	}
	return b
}

func decodePlaces(r *reader) Command {
	n := r.uvarint()
	if n > MaxShards {
		r.err = fmt.Errorf("cluster: %d places in one entry", n)
		return Places(nil)
	}
	c := make(Places, 0, n)
	for range n {
		p := Place{Shard: int(r.uvarint()), Epoch: r.uvarint()}
		p.Voters = readVoters(r)
		if r.err != nil {
			return Places(nil)
		}
		c = append(c, p)
	}
	return c
}

func readVoters(r *reader) []string {
	m := r.uvarint()
	if m > MaxReplicas {
		r.err = fmt.Errorf("cluster: %d voters", m)
		return nil
	}
	var vs []string
	for range m {
		vs = append(vs, r.string())
	}
	return vs
}

func (c Places) apply(s *state, index uint64) ([]byte, error) {
	p := &s.placement
	if len(p.shards) == 0 {
		return nil, fmt.Errorf("cluster: shards placed before their count is chosen")
	}
	out := make([]byte, len(c))
	for i, pl := range c {
		if pl.Shard < 0 || pl.Shard >= len(p.shards) || p.shards[pl.Shard].Epoch != pl.Epoch || !validVoters(pl.Voters, p.replicas) {
			continue
		}
		vs := slices.Clone(pl.Voters)
		slices.Sort(vs)
		p.shards[pl.Shard].Voters = vs
		p.shards[pl.Shard].Epoch = index
		out[i] = 1
	}
	return out, nil
}

// validVoters reports whether vs are 1 to replicas distinct, non-empty names.
func validVoters(vs []string, replicas int) bool {
	if len(vs) == 0 || len(vs) > replicas {
		return false
	}
	for i, v := range vs {
		if v == "" || slices.Contains(vs[:i], v) {
			return false
		}
	}
	return true
}

// ShardReady records that a shard's Raft configuration is its place's voters at Epoch; an
// older epoch than the shard's changes nothing. Its result is 1 if it applied, else 0.
type ShardReady struct {
	Shard int
	Epoch uint64
}

func (ShardReady) kind() kind { return kindShardReady }

func (c ShardReady) appendBody(b []byte) []byte {
	return appendUvarint(appendUvarint(b, uint64(c.Shard)), c.Epoch)
}

func decodeShardReady(r *reader) Command {
	return ShardReady{Shard: int(r.uvarint()), Epoch: r.uvarint()}
}

func (c ShardReady) apply(s *state, _ uint64) ([]byte, error) {
	p := &s.placement
	if c.Shard < 0 || c.Shard >= len(p.shards) || p.shards[c.Shard].Epoch != c.Epoch {
		return []byte{0}, nil
	}
	p.shards[c.Shard].Ready = c.Epoch
	return []byte{1}, nil
}

func capturePlacement(s *state) func([]byte) []byte {
	p := s.placement
	if len(p.shards) == 0 {
		return nil
	}
	shards := slices.Clone(p.shards) // Voters are replaced, never changed in place
	return func(b []byte) []byte {
		b = appendUvarint(b, uint64(len(shards)))
		b = appendUvarint(b, uint64(p.replicas))
		for _, sh := range shards {
			b = appendUvarint(b, sh.Epoch)
			b = appendUvarint(b, sh.Ready)
			b = appendUvarint(b, uint64(len(sh.Voters)))
			for _, v := range sh.Voters {
				b = appendString(b, v)
			}
		}
		return b
	}
}

func restorePlacement(s *state, r *reader) {
	n := r.uvarint()
	replicas := int(r.uvarint())
	if n > MaxShards {
		r.err = fmt.Errorf("cluster: %d shards", n)
		return
	}
	shards := make([]ShardPlace, 0, n)
	for range n {
		sh := ShardPlace{Epoch: r.uvarint(), Ready: r.uvarint()}
		sh.Voters = readVoters(r)
		shards = append(shards, sh)
	}
	if r.err != nil {
		return
	}
	s.placement = placement{replicas: replicas, shards: shards}
}

// Placement returns the shard table: the replicas per shard and each shard's place (a
// copy); 0 and nil before the count is chosen.
func (f *FSM) Placement() (replicas int, shards []ShardPlace) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.placement.replicas, slices.Clone(f.s.placement.shards)
}

// ShardOf is the shard of a client id among count shards: FNV-1a of the id, the same on
// every node and every build (the shard of a session never changes while count does
// not). Written out, since hash/fnv's Hash costs an allocation per CONNECT.
func ShardOf(clientID string, count int) int {
	return int(fnv1a(fnvOffset, clientID) % uint64(count))
}

// FNV-1a, 64 bits.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}
