package store

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
)

// A logIndex maps each live key of a log file to where its value lies in the file: what
// a replay of the log leaves. It holds keys and offsets, never values, so a replay takes
// memory for the number of live records, not their size (about 80 bytes and the key's
// length each). A client's keys are kept apart under its prefix, so that DeleteSession's
// range deletion drops them at once instead of walking every key.
type logIndex struct {
	keys    map[string]valueLoc            // keys outside every client's range
	clients map[string]map[string]valueLoc // by client prefix: the client's keys
	live    int64                          // bytes the live records take as sets
	version uint64                         // counts the changes, for the sorted cache
}

// allKeysUpper is above every key of the store.
var allKeysUpper = []byte{0xff}

// A valueLoc is where a value lies in the log file.
type valueLoc struct {
	off int64
	n   uint32
}

func newLogIndex() *logIndex {
	return &logIndex{keys: make(map[string]valueLoc), clients: make(map[string]map[string]valueLoc)}
}

// setSize is the size of a set operation of key k and a value of n bytes in a batch.
func setSize(k string, n uint32) int64 { return int64(9 + len(k) + int(n)) }

// clientOf returns the client prefix of key k, or "" if k is not a client record.
func clientOf(k []byte) string {
	if len(k) < 3 || k[0] != prefixClient {
		return ""
	}
	n := 3 + int(binary.BigEndian.Uint16(k[1:3]))
	if len(k) <= n {
		return ""
	}
	return string(k[:n])
}

func (x *logIndex) set(k []byte, loc valueLoc) {
	x.version++
	m := x.keys
	if c := clientOf(k); c != "" {
		if m = x.clients[c]; m == nil {
			m = make(map[string]valueLoc)
			x.clients[c] = m
		}
	}
	key := string(k)
	if old, ok := m[key]; ok {
		x.live -= setSize(key, old.n)
	}
	m[key] = loc
	x.live += setSize(key, loc.n)
}

func (x *logIndex) delete(k []byte) {
	x.version++
	m := x.keys
	c := clientOf(k)
	if c != "" {
		m = x.clients[c]
	}
	if old, ok := m[string(k)]; ok {
		x.live -= setSize(string(k), old.n)
		delete(m, string(k))
		if c != "" && len(m) == 0 {
			delete(x.clients, c)
		}
	}
}

// deleteRange deletes the keys in [lo, hi): at once when it is one client's range (what
// DeleteSession and the sweep delete), key by key otherwise.
func (x *logIndex) deleteRange(lo, hi []byte) {
	x.version++
	if c := string(lo); len(hi) == len(lo)+1 && hi[len(lo)] == kindEnd && clientOf(hi) == c &&
		string(hi[:len(lo)]) == c {
		for k, loc := range x.clients[c] {
			x.live -= setSize(k, loc.n)
		}
		delete(x.clients, c)
		return
	}
	in := func(k string) bool { return k >= string(lo) && k < string(hi) }
	for k, loc := range x.keys {
		if in(k) {
			x.live -= setSize(k, loc.n)
			delete(x.keys, k)
		}
	}
	for c, m := range x.clients {
		for k, loc := range m {
			if in(k) {
				x.live -= setSize(k, loc.n)
				delete(m, k)
			}
		}
		if len(m) == 0 {
			delete(x.clients, c)
		}
	}
}

// A keyLoc is a key and where its value lies.
type keyLoc struct {
	k   string
	loc valueLoc
}

// sorted returns the keys in [lower, upper) in order, with their values' places.
func (x *logIndex) sorted(lower, upper []byte) []keyLoc {
	var out []keyLoc
	add := func(m map[string]valueLoc) {
		for k, loc := range m {
			if k >= string(lower) && k < string(upper) {
				out = append(out, keyLoc{k, loc})
			}
		}
	}
	add(x.keys)
	for _, m := range x.clients {
		add(m)
	}
	slices.SortFunc(out, func(a, b keyLoc) int { return strings.Compare(a.k, b.k) })
	return out
}

var errBadOp = errors.New("malformed operation")

// apply applies the operations of payload, a Batch's data found at offset base of the
// file, to x.
func (x *logIndex) apply(payload []byte, base int64) error {
	for off := 0; off < len(payload); {
		if len(payload)-off < 5 {
			return errBadOp
		}
		op := payload[off]
		kn := int(binary.LittleEndian.Uint32(payload[off+1:]))
		off += 5
		if kn > len(payload)-off {
			return errBadOp
		}
		key := payload[off : off+kn]
		off += kn
		if op == opDelete {
			x.delete(key)
			continue
		}
		if len(payload)-off < 4 {
			return errBadOp
		}
		vn := int(binary.LittleEndian.Uint32(payload[off:]))
		off += 4
		if vn > len(payload)-off {
			return errBadOp
		}
		switch op {
		case opSet:
			x.set(key, valueLoc{base + int64(off), uint32(vn)})
		case opDeleteRange:
			x.deleteRange(key, payload[off:off+vn])
		default:
			return errBadOp
		}
		off += vn
	}
	return nil
}
