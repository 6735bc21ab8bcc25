package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
	"time"
)

// A cache remembers recent successful logins, so that a reconnect storm costs one HMAC
// per client instead of one password hash (tens of milliseconds each: a thousand clients
// coming back after a network blip would otherwise hold the auth pool for a minute).
//
// It holds no password and no hash from the file: an entry is a 128-bit tag,
// HMAC-SHA-256 under a random key made for this cache, over the username and password,
// with its expiry. Only successes are cached, so guessing stays paced by the hash. The
// trade-off: while an entry lives, a copy of the process memory holding both the key and
// the tag lets an attacker test guesses for that login at HMAC speed rather than bcrypt
// speed. A short TTL bounds that window; cache_size: 0 turns the cache off.
//
// The cache belongs to one state snapshot: a reload starts an empty one, so a removed
// user or a changed password is not served from it. Size is capped: when full, the
// oldest entry goes (FIFO, which for a cache of equal TTLs is also nearest to expiry).
type cache struct {
	ttl  time.Duration
	pool sync.Pool // of hash.Hash, HMAC under key

	size int // the most entries held

	mu   sync.Mutex    // guards the fields below
	m    map[tag]int64 // tag → expiry, unix nanoseconds
	ring []tag         // insertion order; grows to size, then wraps
	next int           // once full, the ring slot the next insertion takes (the oldest)
}

type tag [16]byte

func newCache(size int, ttl time.Duration) *cache {
	c := &cache{ttl: ttl, size: size, m: make(map[tag]int64)}
	key := make([]byte, 32)
	randomKey(key)
	c.pool.New = func() any { return hmac.New(sha256.New, key) }
	return c
}

// tagOf returns the tag of a username and password; the length prefix keeps ("ab","c")
// and ("a","bc") apart.
func (c *cache) tagOf(user string, pw []byte) tag {
	h := c.pool.Get().(hash.Hash)
	h.Reset()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(user)))
	h.Write(n[:])
	h.Write([]byte(user))
	h.Write(pw)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	c.pool.Put(h)
	var t tag
	copy(t[:], sum[:])
	return t
}

// hit reports whether this login succeeded within the TTL.
func (c *cache) hit(user string, pw []byte) bool {
	t := c.tagOf(user, pw)
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	exp, ok := c.m[t]
	return ok && now < exp
}

// add remembers a successful login.
func (c *cache) add(user string, pw []byte) {
	t := c.tagOf(user, pw)
	exp := time.Now().Add(c.ttl).UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[t]; ok {
		c.m[t] = exp // refreshed; keeps its place in the ring
		return
	}
	c.m[t] = exp
	if len(c.ring) < c.size {
		c.ring = append(c.ring, t)
		return
	}
	delete(c.m, c.ring[c.next])
	c.ring[c.next] = t
	c.next = (c.next + 1) % c.size
}

// len returns the number of entries, expired ones included.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
