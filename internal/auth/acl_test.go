package auth

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// testACL is the ACL the matching tests run against.
const testACL = `# anonymous clients: lines before any user line
topic read public/#
topic deny public/secret
topic read $SYS/broker/uptime

user alice
topic readwrite a/#
topic deny a/private/#
topic write   sensors/+/temp
topic read with space/in filter

user bob
topic #

user carl
topic read #

user dan
# dan only has the patterns

pattern readwrite users/%u/#
pattern read devices/%c/+/state
pattern deny users/%u/locked
pattern write $SYS/broker/connection/%c/state
`

func mustACL(t testing.TB, text string) *acl {
	t.Helper()
	l, err := parseACL("acl", []byte(text), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestACLAllow(t *testing.T) {
	l := mustACL(t, testACL)
	for _, tc := range []struct {
		user, client string
		a            Access
		topic        string
		want         bool
	}{
		// anonymous rules, deny wins over a broader grant
		{"", "c", Read, "public/news", true},
		{"", "c", Read, "public", true}, // public/# matches its parent level [MQTT-4.7.1-2]
		{"", "c", Write, "public/news", false},
		{"", "c", Read, "public/secret", false},
		{"", "c", Read, "private/x", false},
		{"", "c", Read, "$SYS/broker/uptime", true},
		{"", "c", Read, "$SYS/broker/load", false},
		// a named user has only its own section and the patterns, not the anonymous rules
		{"alice", "c", Read, "public/news", false},
		{"alice", "c", Write, "a/b/c", true},
		{"alice", "c", Read, "a", true},
		{"alice", "c", Read, "a/private", false},
		{"alice", "c", Write, "a/private/x", false},
		{"alice", "c", Write, "sensors/kitchen/temp", true},
		{"alice", "c", Read, "sensors/kitchen/temp", false},
		{"alice", "c", Write, "sensors/kitchen/humidity", false},
		{"alice", "c", Write, "sensors/kitchen", false},
		{"alice", "c", Read, "with space/in filter", true},
		// "a/../b" is a literal level, not a path: it never reaches b/...
		{"alice", "c", Write, "a/../b", true},
		{"dan", "c", Write, "users/dan/../eve/x", true}, // still under users/dan/
		{"dan", "c", Write, "users/eve/x", false},
		{"alice", "c", Write, "b", false},
		{"alice", "c", Write, "a/..", true},
		// # does not reach $-topics unless the rule names them [MQTT-4.7.2-1]
		{"bob", "c", Write, "anything/at/all", true},
		{"bob", "c", Read, "$SYS/broker/uptime", false},
		{"carl", "c", Read, "$SYS/broker/uptime", false},
		{"carl", "c", Write, "x", false},
		// patterns apply to everyone, named users included
		{"alice", "c", Write, "users/alice/inbox", true},
		{"alice", "c", Write, "users/bob/inbox", false},
		{"alice", "c", Read, "users/alice/locked", false}, // pattern deny
		{"bob", "c", Write, "users/bob/locked", false},    // deny pattern beats bob's topic #
		{"dan", "c", Read, "users/dan", true},
		{"dan", "c", Read, "devices/c/temp/state", true},
		{"dan", "c", Read, "devices/c2/temp/state", false},
		{"dan", "dev1", Write, "$SYS/broker/connection/dev1/state", true},
		{"dan", "dev1", Read, "$SYS/broker/connection/dev1/state", false},
		{"nobody", "c", Read, "users/nobody/x", true}, // a user without a section
		// %u needs a username: an anonymous client gets no %u rule
		{"", "c", Read, "users//x", false},
		{"", "c", Read, "devices/c/t/state", true},
	} {
		t.Run(fmt.Sprintf("%s/%s/%d/%s", tc.user, tc.client, tc.a, tc.topic), func(t *testing.T) {
			if got := l.allow(tc.user, tc.client, tc.a, tc.topic); got != tc.want {
				t.Fatalf("allow = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestACLUnsafeIdentity checks a username or client id containing +, # or / cannot reach
// outside its own subtree through %u or %c, and that a deny pattern naming it denies all.
func TestACLUnsafeIdentity(t *testing.T) {
	l := mustACL(t, "topic read open/#\npattern readwrite users/%u/#\npattern readwrite clients/%c/#\n")
	for _, tc := range []struct {
		user, client string
		a            Access
		topic        string
		want         bool
	}{
		{"a/b", "c", Write, "users/a/b/x", false}, // would be user a's subtree
		{"a", "c", Write, "users/a/b/x", true},
		{"+", "c", Subscribe, "users/+/x", false},
		{"#", "c", Subscribe, "users/#", false},
		{"ok", "c/d", Write, "clients/c/d", false},
		{"ok", "+", Subscribe, "clients/+/x", false},
		{"ok", "#", Subscribe, "clients/#", false},
		{"ok", "#", Write, "users/ok/x", true}, // the %u rule still serves a safe username
		{"", "#", Read, "open/x", true},        // rules without %c are unaffected
		// a first level substituted from an identity never reaches $-topics
	} {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.user, tc.client, tc.topic), func(t *testing.T) {
			if got := l.allow(tc.user, tc.client, tc.a, tc.topic); got != tc.want {
				t.Fatalf("allow = %v, want %v", got, tc.want)
			}
		})
	}

	deny := mustACL(t, "topic read #\npattern deny private/%c/#\n")
	if deny.allow("", "a/b", Read, "public") {
		t.Error("a deny pattern naming an unsafe client id does not deny everything")
	}
	if !deny.allow("", "ab", Read, "public") || deny.allow("", "ab", Read, "private/ab/x") {
		t.Error("the deny pattern is wrong for a safe client id")
	}

	dollar := mustACL(t, "pattern read %c/#\npattern read %u/#\n")
	if dollar.allow("$SYS", "$SYS", Read, "$SYS/broker/uptime") || dollar.allow("x", "$SYS", Subscribe, "$SYS/#") {
		t.Error("an identity named $SYS reads $SYS through a pattern")
	}
	if !dollar.allow("", "dev", Read, "dev/x") {
		t.Errorf("pattern %s does not serve a plain client id", "%c/#")
	}
}

// TestACLSubscribe checks which filters a client may subscribe to, and which of those
// need no per-message check (Covers).
func TestACLSubscribe(t *testing.T) {
	l := mustACL(t, testACL)
	for _, tc := range []struct {
		user, filter string
		allow, cover bool
	}{
		{"alice", "a/#", true, false},   // a/private/# is denied inside it: check each message
		{"alice", "a/+/b", true, false}, // a/private/b is denied
		{"alice", "a/x/+", true, true},
		{"alice", "a/b", true, true},
		{"alice", "a/private/#", false, false}, // all of it is denied
		{"alice", "a/private/x", false, false},
		{"alice", "a/+/x", true, false}, // a/private/x is denied
		{"alice", "#", true, false},     // partly readable: allowed, checked per message
		{"alice", "+/b", true, false},
		{"alice", "sensors/+/temp", false, false}, // write only
		{"alice", "b/#", false, false},            // nothing readable
		{"carl", "#", true, false},                // the pattern denies users/carl/locked
		{"carl", "x/#", true, true},
		{"carl", "$SYS/#", false, false}, // # does not reach $SYS
		{"carl", "+/x", true, true},
		{"", "#", true, false},
		{"", "$SYS/#", true, false}, // only $SYS/broker/uptime is readable
		{"", "$SYS/broker/uptime", true, true},
		{"", "public/#", true, false},
		{"", "public/+", true, false},
		{"", "public/news", true, true},
		{"", "public/secret", false, false},
		{"dan", "users/dan/#", true, false}, // users/dan/locked is denied
		{"dan", "users/dan/inbox/#", true, true},
		{"dan", "users/+/inbox", true, false},
		{"dan", "users/eve/#", false, false},
		{"dan", "devices/c/+/state", true, true},
		{"dan", "devices/c/#", true, false},
	} {
		t.Run(tc.user+"/"+tc.filter, func(t *testing.T) {
			if got := l.allow(tc.user, "c", Subscribe, tc.filter); got != tc.allow {
				t.Errorf("allow = %v, want %v", got, tc.allow)
			}
			if got := l.covers(tc.user, "c", tc.filter); got != tc.cover {
				t.Errorf("covers = %v, want %v", got, tc.cover)
			}
		})
	}
}

// TestACLCoversIsSound checks Covers against Allow on many topics: whenever Covers says a
// filter needs no per-message check, every topic it matches must be readable.
func TestACLCoversIsSound(t *testing.T) {
	l := mustACL(t, testACL)
	levels := []string{"a", "b", "private", "secret", "public", "users", "dan", "locked", "$SYS", "broker", "uptime", "x", ".."}
	var topics []string
	for _, x := range levels {
		topics = append(topics, x)
		for _, y := range levels[:8] {
			topics = append(topics, x+"/"+y)
			for _, z := range levels[5:] {
				topics = append(topics, x+"/"+y+"/"+z)
			}
		}
	}
	filters := []string{"#", "+", "+/#", "a/#", "a/+", "a/+/#", "public/#", "users/dan/#", "users/+/locked",
		"$SYS/#", "$SYS/broker/+", "+/+/+", "a/private/+", "users/dan/+"}
	for _, user := range []string{"", "alice", "bob", "carl", "dan"} {
		for _, f := range filters {
			cov := l.covers(user, "c", f)
			any := false
			for _, topic := range topics {
				if !matchFilter(f, topic) {
					continue
				}
				r := l.allow(user, "c", Read, topic)
				any = any || r
				if cov && !r {
					t.Errorf("user %q: covers(%q) but %q is not readable", user, f, topic)
				}
			}
			if any && !l.allow(user, "c", Subscribe, f) {
				t.Errorf("user %q: %q is refused though some of its topics are readable", user, f)
			}
		}
	}
}

// matchFilter is an independent, plain MQTT topic matcher for the tests.
func matchFilter(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	f, t := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, p := range f {
		if p == "#" {
			return true
		}
		if i >= len(t) || p != "+" && p != t[i] {
			return false
		}
	}
	return len(f) == len(t)
}

func TestACLParse(t *testing.T) {
	l := mustACL(t, "  topic\tread  a/b  \n\t# indented comment\ntopic c/d\nuser  the user \ntopic write e\n")
	if len(l.anonymous.allow) != 2 || l.anonymous.allow[0].grant != Read || l.anonymous.allow[1].grant != Read|Write {
		t.Fatalf("anonymous rules %+v", l.anonymous)
	}
	if rs := l.users["the user"]; rs == nil || len(rs.allow) != 1 || rs.allow[0].grant != Write {
		t.Fatalf("users %v", l.users)
	}

	var log bytes.Buffer
	_, err := parseACL("acl", []byte(strings.Join([]string{
		"topic",                 // 1
		"topic read",            // 2: "read" is the filter, as in Mosquitto
		"topic reed a/b",        // 3
		"user",                  // 4
		"topic a/#/b",           // 5
		"topic a/b+",            // 6
		"pattern dev-%c/x",      // 7
		"subscribe a",           // 8
		"pattern read x/#",      // 9: no %u or %c: a warning
		"topic read users/%u/x", // 10: literal in a topic rule: a warning
		"topic read a\x00b",     // 11
		"pattern a/%u/%c/#",     // 12
		"topic deny with space", // 13: "with space" is the filter
	}, "\n")), slog.New(slog.NewTextHandler(&log, nil)))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"acl:1: topic: missing topic filter",
		`acl:3: topic: access "reed" is not read, write, readwrite or deny`,
		"acl:4: user: missing username",
		`acl:5: topic: "a/#/b": # must be the last level`,
		`acl:6: topic: "a/b+": a wildcard must be a whole level`,
		`acl:7: pattern: level "dev-%c": %u and %c must be a whole level`,
		`acl:8: unknown keyword "subscribe"`,
		"acl:11: topic: topic filter contains U+0000",
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("errors:\n%v\nwant %d", err, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
	for _, w := range []string{"line=9", "line=10"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("no warning with %s in:\n%s", w, log.String())
		}
	}
}

// TestACLAllowAllocs proves the common checks allocate nothing.
func TestACLAllowAllocs(t *testing.T) {
	l := mustACL(t, testACL)
	for _, tc := range []struct {
		user string
		a    Access
		s    string
	}{
		{"alice", Write, "a/b/c"},
		{"alice", Read, "a/private/x"},
		{"dan", Write, "users/dan/x"},
		{"", Read, "public/news"},
		{"alice", Subscribe, "a/+/b"},
	} {
		n := testing.AllocsPerRun(100, func() {
			l.allow(tc.user, "client-1", tc.a, tc.s)
			l.covers(tc.user, "client-1", tc.s)
		})
		if n != 0 {
			t.Errorf("%s %d %s: %v allocations", tc.user, tc.a, tc.s, n)
		}
	}
}

// BenchmarkAllow measures Allow through Auth (snapshot load included) with 100 rules for
// the user plus a few patterns, on hits at the front and the back of the list and a miss.
func BenchmarkAllow(b *testing.B) {
	var text strings.Builder
	for u := range 50 {
		fmt.Fprintf(&text, "user u%d\n", u)
		for r := range 100 {
			fmt.Fprintf(&text, "topic readwrite site/%d/zone/%d/+/data\n", u, r)
		}
		fmt.Fprintf(&text, "topic deny site/%d/zone/0/secret/data\n", u)
	}
	text.WriteString("pattern read users/%u/#\npattern deny users/%u/locked\n")
	a := &Auth{}
	a.state.Store(&state{acl: mustACL(b, text.String())})
	for _, bm := range []struct {
		name  string
		a     Access
		topic string
		want  bool
	}{
		{"Rules=100/Hit=first", Write, "site/7/zone/0/a/data", true},
		{"Rules=100/Hit=last", Write, "site/7/zone/99/a/data", true},
		{"Rules=100/Miss", Write, "site/7/zone/100/a/data", false},
		{"Rules=100/Pattern", Read, "users/u7/inbox", true},
		{"Rules=100/Subscribe", Subscribe, "site/7/zone/99/+/data", true},
	} {
		if a.Allow("u7", "c", bm.a, bm.topic) != bm.want {
			b.Fatalf("%s: wrong answer", bm.name)
		}
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.Allow("u7", "c", bm.a, bm.topic)
			}
		})
	}
}

// TestRuleMatchingExhaustive compares matchName, intersects and covers with the plain
// matcher, over every rule and filter of up to three levels drawn from a, $s, + and #, and
// every topic of up to four levels drawn from a, b, $s and "" (which tells apart every
// pair of such filters).
func TestRuleMatchingExhaustive(t *testing.T) {
	var filters []string
	var grow func(prefix string, depth int)
	grow = func(prefix string, depth int) {
		for _, tok := range []string{"a", "$s", "+", "#"} {
			f := tok
			if depth > 0 {
				f = prefix + "/" + tok
			}
			filters = append(filters, f)
			if tok != "#" && depth < 2 {
				grow(f, depth+1)
			}
		}
	}
	grow("", 0)
	var topics []string
	var growT func(prefix string, depth int)
	growT = func(prefix string, depth int) {
		for _, tok := range []string{"a", "b", "$s", ""} {
			tp := tok
			if depth > 0 {
				tp = prefix + "/" + tok
			}
			topics = append(topics, tp)
			if depth < 3 {
				growT(tp, depth+1)
			}
		}
	}
	growT("", 0)
	id := newIdentity("", "")
	for _, rs := range filters {
		r, msg := parseRule(rs, false)
		if msg != "" {
			t.Fatalf("%s: %s", rs, msg)
		}
		var match []bool
		for _, tp := range topics {
			m := matchFilter(rs, tp)
			match = append(match, m)
			if got := r.matchName(tp, &id); got != m {
				t.Fatalf("rule %q, topic %q: matchName = %v, want %v", rs, tp, got, m)
			}
		}
		for _, fs := range filters {
			f := newFilter(fs)
			inter, cover := false, true
			for i, tp := range topics {
				if !matchFilter(fs, tp) {
					continue
				}
				inter = inter || match[i]
				cover = cover && match[i]
			}
			if got := r.intersects(&f, &id); got != inter {
				t.Errorf("rule %q, filter %q: intersects = %v, want %v", rs, fs, got, inter)
			}
			if got := r.covers(&f, &id); got != cover {
				t.Errorf("rule %q, filter %q: covers = %v, want %v", rs, fs, got, cover)
			}
		}
	}
}

// quiet is a logger for tests that do not look at the log.
var quiet = slog.New(slog.DiscardHandler)
