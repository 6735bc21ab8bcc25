package fsm

import (
	"cmp"
	"slices"
)

// Planning the shard table: which nodes each shard should have, by rendezvous hashing
// (each shard ranks the nodes by a hash of the pair and takes the first ones), so that a
// node joining or leaving moves only the shards it enters or leaves. The planner is pure:
// the leader calls it with the members and their liveness and writes what it returns.

// A Member is a node the planner may place shards on.
type Member struct {
	Name string
	// Live is false for a node that failed (it is still in the cluster and may come
	// back with its data): its shards are moved to another node when there is one.
	Live bool
}

// PlanPlacement returns the places that move the table one step toward its target: every
// shard with replicas voters (every live member when there are fewer), the first ones in
// its ranking of the live members. A shard not yet placed is placed whole; any other
// changes one voter per step, and only once its group follows its place (Ready == Epoch),
// so that its Raft configuration changes one server at a time. At most maxMoves placed
// shards change, repairs first (a voter that left the cluster, then one that failed,
// replaced by a live node), then growth (fewer voters than the target), then balance (a
// node that joined takes its share). A failed voter with no live node to take its place
// stays: it may come back, and a smaller group would tolerate no more failures than one
// with a dead voter.
func PlanPlacement(replicas int, shards []ShardPlace, members []Member, maxMoves int) Places {
	live := make([]string, 0, len(members))
	state := make(map[string]bool, len(members)) // member name → live
	for _, m := range members {
		state[m.Name] = m.Live
		if m.Live {
			live = append(live, m.Name)
		}
	}
	if len(live) == 0 || replicas < 1 {
		return nil
	}
	want := min(replicas, len(live))
	var first Places
	var moves [4][]Place // by priority: left, failed, growth, balance
	for id, sh := range shards {
		ranked := rank(id, live)
		if sh.Epoch == 0 {
			first = append(first, Place{Shard: id, Epoch: 0, Voters: sorted(ranked[:want])})
			continue
		}
		if sh.Ready != sh.Epoch {
			continue
		}
		p, prio, ok := step(id, sh, ranked, want, state)
		if ok {
			moves[prio] = append(moves[prio], p)
		}
	}
	out := first
	for _, ms := range moves {
		for _, p := range ms {
			if maxMoves <= 0 {
				return out
			}
			out = append(out, p)
			maxMoves--
		}
	}
	return out
}

// step is one shard's next change and its priority, if it needs one.
func step(id int, sh ShardPlace, ranked []string, want int, state map[string]bool) (Place, int, bool) {
	target := ranked[:want]
	// in is the best-ranked live node the shard lacks.
	in := ""
	for _, n := range target {
		if !slices.Contains(sh.Voters, n) {
			in = n
			break
		}
	}
	swap := func(out string, prio int) (Place, int, bool) {
		vs := slices.DeleteFunc(slices.Clone(sh.Voters), func(v string) bool { return v == out })
		if in != "" {
			vs = append(vs, in)
		}
		return Place{Shard: id, Epoch: sh.Epoch, Voters: sorted(vs)}, prio, len(vs) > 0
	}
	// A voter that left the cluster goes, replaced when a live node is spare.
	for _, v := range sh.Voters {
		if _, member := state[v]; !member {
			return swap(v, 0)
		}
	}
	if in == "" { // the voters are the target, or more than the live nodes: keep them
		return Place{}, 0, false
	}
	// A failed voter goes when a live node takes its place.
	for _, v := range sh.Voters {
		if !state[v] {
			return swap(v, 1)
		}
	}
	if len(sh.Voters) < want {
		return Place{Shard: id, Epoch: sh.Epoch, Voters: sorted(append(slices.Clone(sh.Voters), in))}, 2, true
	}
	// Balance: the worst-ranked voter makes room for the node that ranks above it.
	pos := func(n string) int { return slices.Index(ranked, n) }
	worst := slices.MaxFunc(sh.Voters, func(a, b string) int { return cmp.Compare(pos(a), pos(b)) })
	if pos(worst) < want {
		return Place{}, 0, false
	}
	return swap(worst, 3)
}

// rank orders the nodes for a shard: by descending score of the pair, ties by name.
func rank(shard int, nodes []string) []string {
	r := slices.Clone(nodes)
	score := func(n string) uint64 { return mix(fnv1a(fnv1a(fnvOffset, n)^uint64(shard), "\x00")) }
	slices.SortFunc(r, func(a, b string) int {
		if c := cmp.Compare(score(b), score(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return r
}

// mix is splitmix64's finaliser: FNV's low bits alone rank poorly.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func sorted(vs []string) []string {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	return vs
}
