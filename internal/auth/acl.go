package auth

import (
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"
)

// The ACL file, in Mosquitto's acl_file syntax (the package doc lists where bifrost
// differs):
//
//	# a comment
//	topic [read|write|readwrite|deny] <filter>     a rule for the current user
//	user <username>                                 the rules after it are this user's
//	pattern [read|write|readwrite|deny] <filter>   a rule for every client; %u and %c
//	                                                stand for its username and client id
//
// topic lines before any user line are the anonymous clients' rules. Without an access
// word a rule grants readwrite; a filter containing a blank needs the access word.

// An acl is a loaded ACL file. It is read-only once built, so any number of goroutines
// may check it at once.
type acl struct {
	anonymous ruleSet             // topic rules before any user line
	users     map[string]*ruleSet // by username
	patterns  ruleSet             // pattern rules, for everyone
	rules     int                 // how many, for the log
}

// A ruleSet keeps deny rules apart from the others, so that a check looks at every deny
// before it may stop at the first grant: deny wins.
type ruleSet struct {
	deny, allow []rule
}

// A rule is one topic or pattern line, its filter split into levels.
type rule struct {
	levels []level
	// prefix is the filter's leading literal levels, each with its '/', where a check
	// starts with one string comparison; with no other level (full) it is the whole
	// filter, without a trailing '/'.
	prefix string
	npre   int    // the levels in prefix
	full   bool   // every level is literal
	grant  Access // Read and/or Write; 0 for deny
	dollar bool   // the first level is a literal starting with '$'
	subst0 bool   // the first level is %u or %c
	user   bool   // some level is %u
	client bool   // some level is %c
}

// A level is one level of a rule's filter.
type level struct {
	s    string // the literal; "" for the other kinds
	kind levelKind
}

type levelKind uint8

const (
	levLiteral levelKind = iota
	levPlus              // +
	levHash              // #
	levUser              // %u, pattern rules only
	levClient            // %c, pattern rules only
)

// parseACL parses an ACL file's contents; name labels errors and warnings.
func parseACL(name string, data []byte, log *slog.Logger) (*acl, error) {
	l := &acl{users: map[string]*ruleSet{}}
	fe := fileErrors{file: name}
	cur := &l.anonymous
	eachLine(data, func(n int, line string) {
		line = strings.TrimRight(line, " \t\r\v\f")
		body := strings.TrimLeft(line, " \t")
		if body == "" || body[0] == '#' {
			return
		}
		keyword, rest, _ := strings.Cut(body, " ")
		if k, r, ok := strings.Cut(body, "\t"); ok && len(k) < len(keyword) {
			keyword, rest = k, r
		}
		rest = strings.TrimLeft(rest, " \t")
		switch keyword {
		case "user":
			if rest == "" {
				fe.add(n, "user: missing username")
				return
			}
			if !utf8.ValidString(rest) {
				fe.add(n, "user: the username is not valid UTF-8")
				return
			}
			if l.users[rest] == nil {
				l.users[rest] = &ruleSet{}
			}
			cur = l.users[rest]
		case "topic", "pattern":
			r, msg := parseRule(rest, keyword == "pattern")
			if msg != "" {
				fe.add(n, "%s: %s", keyword, msg)
				return
			}
			if keyword == "pattern" && !r.user && !r.client {
				log.Warn("auth: ACL pattern without %u or %c applies to every client alike", "file", name, "line", n)
			}
			if keyword == "topic" && (strings.Contains(rest, "%u") || strings.Contains(rest, "%c")) {
				log.Warn("auth: %u and %c are literal text in a topic rule; only pattern rules substitute them", "file", name, "line", n)
			}
			set := cur
			if keyword == "pattern" {
				set = &l.patterns
			}
			if r.grant == 0 {
				set.deny = append(set.deny, r)
			} else {
				set.allow = append(set.allow, r)
			}
			l.rules++
		default:
			fe.add(n, "unknown keyword %q: want topic, pattern, user or a # comment", keyword)
		}
	})
	if err := fe.err(); err != nil {
		return nil, err
	}
	return l, nil
}

// parseRule parses what follows topic or pattern: an optional access word and a filter.
// msg says what is wrong.
func parseRule(s string, pattern bool) (r rule, msg string) {
	if s == "" {
		return r, "missing topic filter"
	}
	filter := s
	r.grant = Read | Write
	if word, rest, ok := cutBlank(s); ok {
		filter = rest
		switch word {
		case "read":
			r.grant = Read
		case "write":
			r.grant = Write
		case "readwrite":
			r.grant = Read | Write
		case "deny":
			r.grant = 0
		default:
			return r, fmt.Sprintf("access %q is not read, write, readwrite or deny", word)
		}
	}
	if msg := checkFilter(filter); msg != "" {
		return r, msg
	}
	for i, part := range strings.Split(filter, "/") {
		lv := level{s: part}
		switch {
		case part == "+":
			lv = level{kind: levPlus}
		case part == "#":
			lv = level{kind: levHash}
		case pattern && part == "%u":
			lv = level{kind: levUser}
			r.user = true
		case pattern && part == "%c":
			lv = level{kind: levClient}
			r.client = true
		case pattern && (strings.Contains(part, "%u") || strings.Contains(part, "%c")):
			// Mosquitto substitutes anywhere, but its manual asks for a whole level; a
			// partial one ("dev-%c") would let an identity choose where a level ends.
			return r, fmt.Sprintf("level %q: %%u and %%c must be a whole level", part)
		}
		if i == 0 {
			r.dollar = lv.kind == levLiteral && strings.HasPrefix(part, "$")
			r.subst0 = lv.kind == levUser || lv.kind == levClient
		}
		r.levels = append(r.levels, lv)
	}
	for r.npre < len(r.levels) && r.levels[r.npre].kind == levLiteral {
		r.npre++
	}
	r.full = r.npre == len(r.levels)
	if r.full {
		r.prefix = filter
	} else {
		for _, lv := range r.levels[:r.npre] {
			r.prefix += lv.s + "/"
		}
	}
	return r, ""
}

// cutBlank splits s at its first run of blanks; ok is false when there is none.
func cutBlank(s string) (first, rest string, ok bool) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, "", false
	}
	return s[:i], strings.TrimLeft(s[i:], " \t"), true
}

// checkFilter checks a rule's filter is a valid MQTT topic filter [MQTT-4.7.1-1]
// [MQTT-4.7.1-2] [MQTT-4.7.3-1] and returns what is wrong, or "".
func checkFilter(f string) string {
	switch {
	case f == "":
		return "missing topic filter"
	case len(f) > 65535:
		return "topic filter longer than 65535 bytes"
	case !utf8.ValidString(f):
		return "topic filter is not valid UTF-8"
	case strings.ContainsRune(f, 0):
		return "topic filter contains U+0000"
	}
	parts := strings.Split(f, "/")
	for i, p := range parts {
		switch {
		case p == "#" && i != len(parts)-1:
			return fmt.Sprintf("%q: # must be the last level", f)
		case p != "#" && strings.Contains(p, "#"), p != "+" && strings.Contains(p, "+"):
			return fmt.Sprintf("%q: a wildcard must be a whole level", f)
		}
	}
	return ""
}
