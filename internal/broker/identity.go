package broker

import (
	"log/slog"
	"strconv"
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// Who owns a session
//
// A session belongs to the identity whose CONNECT made it: its user name (the one
// authenticated, or the client certificate's where that is the user name, or the one the
// client sent where nothing authenticates it) under its realm, the auth configuration of
// the listener it came through. Anonymous clients of one realm all share the identity "".
// A CONNECT of another identity with the session's client id never resumes it: it gets
// neither the subscriptions, nor the queue, nor the window (either way), nor the will.
// The auth block's foreign_session says what it gets instead:
//
//   - discard (the default): the old session ends as any session does, its will
//     published (spec 3.1.3.2.2: the session ended), a live connection of it taken over
//     (v5 DISCONNECT 0x8E), and the CONNECT starts clean: Session Present 0;
//   - refuse: CONNACK 0x85, Client Identifier not valid (3.1.1: 2, identifier rejected),
//     and the old session and its connection are left alone.
//
// A session restored from a record of the store's format 1, or owned under a realm this
// broker no longer has, has no owner (session.NoRealm): the first CONNECT of its client id
// discards it, whichever the setting, since refusing would lock the id for ever.
//
// The auth block's client_ids bind client ids to user names: a CONNECT whose client id
// matches none of the patterns is refused (0x85, 3.1.1: 2) before it claims anything, so
// that one user cannot even take over another's live connection. A pattern's %u is the
// user name and never matches an anonymous client; a client id the broker assigned (the
// client sent none) is random and exempt.

// idRules are the rules of one auth block about client ids and sessions.
type idRules struct {
	refuse   bool     // foreign_session: refuse
	patterns []string // client_ids; none: any client id
}

// newIDRules returns the rules of auth block a.
func newIDRules(a *conf.Auth) *idRules {
	return &idRules{refuse: a.ForeignSession == conf.ForeignRefuse, patterns: a.ClientIDs}
}

// allows reports whether the client of user may use client id cid.
func (r *idRules) allows(cid, user string, assigned bool) bool {
	if len(r.patterns) == 0 || assigned {
		return true
	}
	for _, p := range r.patterns {
		if matchClientID(p, cid, user) {
			return true
		}
	}
	return false
}

// matchClientID reports whether cid matches pattern p for user: p's text as is, %u for
// user (never for an anonymous client), and a trailing * for any suffix, none included.
func matchClientID(p, cid, user string) bool {
	suffix := strings.HasSuffix(p, "*")
	p = strings.TrimSuffix(p, "*")
	for {
		i := strings.Index(p, "%u")
		lit := p
		if i >= 0 {
			lit = p[:i]
		}
		if !strings.HasPrefix(cid, lit) {
			return false
		}
		cid = cid[len(lit):]
		if i < 0 {
			return suffix || cid == ""
		}
		if user == "" || !strings.HasPrefix(cid, user) {
			return false
		}
		cid, p = cid[len(user):], p[i+2:]
	}
}

// rules returns the rules in force for a client of listener, from the settings in force
// now: the setting is live, for CONNECTs from the next one on.
func (b *Broker) rules(listener string) *idRules {
	set := b.live.set.Load()
	if r := set.idRules[listener]; r != nil {
		return r
	}
	return set.topRules
}

// idAllowed checks a CONNECT's client id against the binding of its auth block, and
// refuses it if it fails; the caller holds cl.mu.
func (b *Broker) idAllowed(cl *client, v packet.Version, cid, user string, assigned bool) bool {
	if b.rules(cl.conn.Listener().Name()).allows(cid, user, assigned) {
		return true
	}
	b.stats.denied("client_id")
	b.refuse(cl, v, packet.ClientIdentifierNotValid, refusal{"client id not bound to the user name (auth.client_ids)", cid, user})
	return false
}

// identityName names the identity of user under realm the same on every node of a
// cluster and in every build, for the cluster's ownership table (cluster_owner.go): the
// realm's name (its listener's; "" for the top-level auth block) with its length, and the
// user name.
func (b *Broker) identityName(realm uint8, user string) string {
	name := ""
	if int(realm) < len(b.realms.names) {
		name = b.realms.names[realm]
	}
	return strconv.Itoa(len(name)) + ":" + name + user
}

// foreign reports whether s, which its client id's CONNECT is claiming, belongs to another
// identity than user in realm: by the owner it records, or for want of one.
func foreign(s *session.Session, user string, realm uint8) bool {
	owner, ownerRealm := s.Identity()
	return owner != user || ownerRealm != realm
}

// foreignDiscarded counts and logs a CONNECT that found its client id's session owned by
// another identity and ended it (foreign_session: discard); a refused one is logged as
// a refused CONNECT.
func (b *Broker) foreignDiscarded(s *session.Session, user string) {
	b.stats.denied("foreign_session")
	owner, realm := s.Identity()
	what := "session of another user discarded; the connect starts clean"
	if realm == session.NoRealm {
		what = "session of unknown owner (from an older store, or an auth block gone) discarded; the connect starts clean"
	}
	b.realms.idLog.Log(b.log, slog.LevelInfo, "foreign", what, "client", s.ClientID(), "user", user, "owner", owner)
}
