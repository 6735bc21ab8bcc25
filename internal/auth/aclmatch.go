package auth

import "strings"

// Checking access. Every check walks the rule levels against the topic or filter string
// in place: no splitting, no building of substituted patterns (Mosquitto allocates one
// per pattern rule per check), so Allow allocates nothing.

// An identity is the client a check is for, with what its pattern rules may use.
type identity struct {
	user, client string
	// userBad, clientBad: the identity contains '+', '#' or '/', so substituting it
	// would let it reach outside its own level (user "a/b" under pattern users/%u/#
	// would reach users/a/...). Allow rules naming it grant nothing; deny rules naming
	// it deny everything (fail closed).
	userBad, clientBad bool
}

func newIdentity(user, client string) identity {
	return identity{
		user: user, client: client,
		userBad:   strings.ContainsAny(user, "+#/"),
		clientBad: strings.ContainsAny(client, "+#/"),
	}
}

// applies reports how r concerns id: use is false when r does not apply (it names %u
// and the client is anonymous, or %c and it has no client id, or an unsafe identity in
// an allow rule); all is true for a deny rule naming an unsafe identity, which then
// denies everything.
func (r *rule) applies(id *identity) (use, all bool) {
	if r.user && (id.user == "" || id.userBad) || r.client && (id.client == "" || id.clientBad) {
		unsafe := r.user && id.userBad || r.client && id.clientBad
		return false, unsafe && r.grant == 0
	}
	return true, false
}

// value is the text a non-wildcard level stands for.
func (l *level) value(id *identity) string {
	switch l.kind {
	case levUser:
		return id.user
	case levClient:
		return id.client
	}
	return l.s
}

// gate applies MQTT's rule for topics starting with '$' [MQTT-4.7.2-1] to a rule and a
// topic name or filter s: a rule can only concern $-topics if its first level is a
// literal naming them, and then only those. A first level substituted from an identity
// never reaches a $-topic: client id "$SYS" under pattern %c/# must not read $SYS.
func (r *rule) gate(s string, id *identity) bool {
	dollar := s != "" && s[0] == '$'
	if r.subst0 {
		v := r.levels[0].value(id)
		return !dollar && !strings.HasPrefix(v, "$")
	}
	return r.dollar == dollar
}

// nextLevel returns the level of s starting at i and the start of the next one; next is
// len(s)+1 after the last level.
func nextLevel(s string, i int) (lv string, next int) {
	if j := strings.IndexByte(s[i:], '/'); j >= 0 {
		return s[i : i+j], i + j + 1
	}
	return s[i:], len(s) + 1
}

// matchName reports whether r's filter matches the topic name t (no wildcards).
func (r *rule) matchName(t string, id *identity) bool {
	if r.full {
		return t == r.prefix // equal strings start with '$' alike: the gate holds
	}
	if !strings.HasPrefix(t, r.prefix) {
		// a/# also matches a, the level above it [MQTT-4.7.1-2]
		return r.npre > 0 && r.levels[r.npre].kind == levHash &&
			len(t) == len(r.prefix)-1 && r.prefix[:len(t)] == t
	}
	if r.npre == 0 && !r.gate(t, id) { // a literal first level has passed the gate with the prefix
		return false
	}
	i := len(r.prefix)
	for k := r.npre; k < len(r.levels); k++ {
		l := &r.levels[k]
		if l.kind == levHash {
			return true // also matches the parent level: a/# matches a
		}
		if i > len(t) {
			return false
		}
		lv, next := nextLevel(t, i)
		if l.kind != levPlus && lv != l.value(id) {
			return false
		}
		i = next
	}
	return i > len(t)
}

// A filter is a subscription filter being checked, with its leading literal levels.
type filter struct {
	s      string
	prefix string // s up to its first wildcard level; s itself when it has none
	name   bool   // no wildcard: it matches one topic name, s
}

func newFilter(s string) filter {
	i := strings.IndexAny(s, "+#")
	if i < 0 {
		return filter{s: s, prefix: s, name: true}
	}
	return filter{s: s, prefix: s[:i]} // a wildcard is a whole level: s[:i] ends with '/' or is ""
}

// samePrefix reports whether the literal prefixes of r and f agree where both have one:
// if not, some literal level differs and no topic matches both.
func (r *rule) samePrefix(f *filter) bool {
	n := min(len(r.prefix), len(f.prefix))
	return r.prefix[:n] == f.prefix[:n]
}

// intersects reports whether some topic name matches both r's filter and filter f.
func (r *rule) intersects(fl *filter, id *identity) bool {
	if fl.name {
		return r.matchName(fl.s, id)
	}
	f := fl.s
	if !r.samePrefix(fl) || !r.gate(f, id) {
		return false
	}
	i := 0
	for k := 0; ; k++ {
		rEnd, fEnd := k == len(r.levels), i > len(f)
		if rEnd && fEnd {
			return true
		}
		if !rEnd && r.levels[k].kind == levHash {
			return true
		}
		var lv string
		var next int
		if !fEnd {
			if lv, next = nextLevel(f, i); lv == "#" {
				return true
			}
		}
		if rEnd || fEnd {
			return false // one has more levels, and the other no # to absorb them
		}
		l := &r.levels[k]
		if l.kind != levPlus && lv != "+" && lv != l.value(id) {
			return false
		}
		i = next
	}
}

// covers reports whether r's filter matches every topic name filter f matches.
func (r *rule) covers(fl *filter, id *identity) bool {
	if fl.name {
		return r.matchName(fl.s, id)
	}
	f := fl.s
	if !r.samePrefix(fl) || !r.gate(f, id) {
		return false
	}
	i := 0
	for k := 0; ; k++ {
		rEnd, fEnd := k == len(r.levels), i > len(f)
		if !rEnd && r.levels[k].kind == levHash {
			return true
		}
		if rEnd || fEnd {
			return rEnd && fEnd
		}
		lv, next := nextLevel(f, i)
		l := &r.levels[k]
		switch {
		case lv == "#":
			// Only a # covers a #, but for +/# at the top: it matches every topic, as #
			// does, since a topic has at least one level.
			return k == 0 && l.kind == levPlus && len(r.levels) == 2 && r.levels[1].kind == levHash
		case lv == "+":
			if l.kind != levPlus {
				return false
			}
		case l.kind != levPlus && lv != l.value(id):
			return false
		}
		i = next
	}
}

// set returns the topic rules of a client: the user's, or the anonymous ones.
func (l *acl) set(user string) *ruleSet {
	if user == "" {
		return &l.anonymous
	}
	return l.users[user] // nil: a user without a section has only the patterns
}

// allow decides one access. Deny wins: any matching deny rule refuses, whatever grants.
//
// Read and Write take a topic name: some rule granting that access must match it.
// Subscribe takes a filter: refused when a deny rule covers all of it; allowed when some
// read rule can match at least one topic of it. Whether each delivery must still be
// checked is what covers answers (a filter partly readable, such as # under a rule
// a/#, is allowed, and only the readable messages reach the client).
func (l *acl) allow(user, client string, a Access, topic string) bool {
	id := newIdentity(user, client)
	var f filter
	if a == Subscribe {
		f = newFilter(topic)
	}
	rs := l.set(user)
	sets := [2]*ruleSet{rs, &l.patterns}
	for _, s := range sets {
		if s == nil {
			continue
		}
		for k := range s.deny {
			r := &s.deny[k]
			use, all := r.applies(&id)
			if all {
				return false
			}
			if !use {
				continue
			}
			if a == Subscribe && r.covers(&f, &id) || a != Subscribe && r.matchName(topic, &id) {
				return false
			}
		}
	}
	want := a
	if a == Subscribe {
		want = Read
	}
	for _, s := range sets {
		if s == nil {
			continue
		}
		for k := range s.allow {
			r := &s.allow[k]
			if r.grant&want == 0 {
				continue
			}
			if use, _ := r.applies(&id); !use {
				continue
			}
			if a == Subscribe && r.intersects(&f, &id) || a != Subscribe && r.matchName(topic, &id) {
				return true
			}
		}
	}
	return false
}

// covers reports whether every topic filter can match is readable by the client: some
// read rule covers the whole filter and no deny rule touches it.
func (l *acl) covers(user, client, s string) bool {
	id := newIdentity(user, client)
	f := newFilter(s)
	sets := [2]*ruleSet{l.set(user), &l.patterns}
	for _, s := range sets {
		if s == nil {
			continue
		}
		for k := range s.deny {
			r := &s.deny[k]
			use, all := r.applies(&id)
			if all || use && r.intersects(&f, &id) {
				return false
			}
		}
	}
	for _, s := range sets {
		if s == nil {
			continue
		}
		for k := range s.allow {
			r := &s.allow[k]
			if r.grant&Read == 0 {
				continue
			}
			if use, _ := r.applies(&id); use && r.covers(&f, &id) {
				return true
			}
		}
	}
	return false
}
