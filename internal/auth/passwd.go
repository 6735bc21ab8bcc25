package auth

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

// The password file, as mosquitto_passwd writes it: one user per line,
//
//	username:record
//
// where record is a password hash (see parseRecord). A line whose first character is #
// is a comment; blank lines are skipped; blanks around the username and the record are
// ignored. Unlike Mosquitto, which skips (with a log line) what it cannot read, bifrost
// refuses the whole file and names every bad line: a user silently missing is a worse
// surprise than a refusal to (re)load.

// passwords is a loaded password file.
type passwords struct {
	byName    map[string]credential
	dummy     credential // what an unknown user is checked against
	scramIter int        // the most common SCRAM iteration count: shown for unknown users
}

// readFile reads a password or ACL file; what names the kind in the error.
func readFile(what, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	return data, nil
}

// parsePasswords decodes a password file's contents; name labels errors.
func parsePasswords(name string, data []byte) (*passwords, error) {
	p := &passwords{byName: map[string]credential{}}
	fe := fileErrors{file: name}
	first := map[string]int{}
	sigs := map[uint64]int{}
	eachLine(data, func(n int, line string) {
		user, rec, ok, msg := splitEntry(line)
		switch {
		case msg != "":
			fe.add(n, "%s", msg)
			return
		case !ok:
			return
		}
		if prev, dup := first[user]; dup {
			fe.add(n, "user %q is also on line %d", user, prev)
			return
		}
		first[user] = n
		c, err := parseRecord(rec)
		if err != nil {
			fe.add(n, "user %q: %v", user, err)
			return
		}
		p.byName[user] = c
		sigs[c.signature()]++
	})
	if err := fe.err(); err != nil {
		return nil, err
	}
	// Unknown users are checked against the most common kind of record, so that they
	// cannot be told apart from most known ones by time.
	var sig uint64
	most := 0
	for s, n := range sigs {
		if n > most || n == most && s < sig {
			sig, most = s, n
		}
	}
	if most == 0 {
		sig = uint64(kindBcrypt)<<32 | uint64(DefaultCost)
	}
	p.dummy = dummyFor(sig)
	p.scramIter = DefaultIterations
	most = 0
	for s, n := range sigs {
		if hashKind(s>>32) == kindSCRAM && (n > most || n == most && int(uint32(s)) < p.scramIter) {
			p.scramIter, most = int(uint32(s)), n
		}
	}
	return p, nil
}

// eachLine calls f with each line of data and its 1-based number, without the line end.
func eachLine(data []byte, f func(n int, line string)) {
	s := string(data)
	for n := 1; s != ""; n++ {
		line, rest, _ := strings.Cut(s, "\n")
		f(n, strings.TrimSuffix(line, "\r"))
		s = rest
	}
}

// splitEntry splits a password file line into username and record. ok is false for a
// comment or a blank line; msg says what is wrong with a bad line.
func splitEntry(line string) (user, rec string, ok bool, msg string) {
	if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
		return "", "", false, ""
	}
	user, rec, found := strings.Cut(line, ":")
	if !found {
		return "", "", false, "not username:hash"
	}
	user, rec = strings.TrimSpace(user), strings.TrimSpace(rec)
	if err := ValidUsername(user); err != nil {
		return "", "", false, err.Error()
	}
	if strings.Contains(rec, ":") {
		return "", "", false, fmt.Sprintf("user %q: the hash contains ':'", user)
	}
	return user, rec, true, ""
}

// ValidUsername checks that u can be a password file user: non-empty, valid UTF-8 of at
// most 65535 bytes (the MQTT limit), without ':' (the field separator), control
// characters, surrounding blanks (which the file format drops) or a leading # (which
// would make the line a comment).
func ValidUsername(u string) error {
	switch {
	case u == "":
		return errors.New("empty username")
	case len(u) > 65535:
		return errors.New("username longer than 65535 bytes")
	case !utf8.ValidString(u):
		return errors.New("username is not valid UTF-8")
	case strings.Contains(u, ":"):
		return fmt.Errorf("username %q contains ':'", u)
	case strings.HasPrefix(u, "#"):
		return fmt.Errorf("username %q starts with '#'", u)
	case strings.TrimSpace(u) != u:
		return fmt.Errorf("username %q starts or ends with a blank", u)
	}
	for _, r := range u {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("username %q contains a control character", u)
		}
	}
	return nil
}

// PasswordFile is the text of a password file, line by line, for editing (bifrost
// passwd): Set and Delete change one user's line and keep every other line as written,
// comments included.
type PasswordFile struct {
	lines []string
}

// ParsePasswordFile reads a password file's contents for editing; name labels errors.
// Every line must be a comment, blank, or username:hash with a valid username, each user
// once. The hashes are not checked, so that a line New refuses (a Mosquitto 1.x $6$
// hash, say) can be replaced or deleted.
func ParsePasswordFile(name string, data []byte) (*PasswordFile, error) {
	f := &PasswordFile{}
	fe := fileErrors{file: name}
	first := map[string]int{}
	eachLine(data, func(n int, line string) {
		f.lines = append(f.lines, line)
		user, _, ok, msg := splitEntry(line)
		switch {
		case msg != "":
			fe.add(n, "%s", msg)
			return
		case !ok:
			return
		}
		if prev, dup := first[user]; dup {
			fe.add(n, "user %q is also on line %d", user, prev)
		}
		first[user] = n
	})
	if err := fe.err(); err != nil {
		return nil, err
	}
	return f, nil
}

// Set makes record the password record of user, replacing the user's line or appending
// one.
func (f *PasswordFile) Set(user, record string) error {
	if err := ValidUsername(user); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if _, err := parseRecord(record); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	entry := user + ":" + record
	if i := f.find(user); i >= 0 {
		f.lines[i] = entry
		return nil
	}
	f.lines = append(f.lines, entry)
	return nil
}

// Delete removes user's line and reports whether there was one.
func (f *PasswordFile) Delete(user string) bool {
	i := f.find(user)
	if i < 0 {
		return false
	}
	f.lines = append(f.lines[:i], f.lines[i+1:]...)
	return true
}

// Has reports whether user has a line.
func (f *PasswordFile) Has(user string) bool { return f.find(user) >= 0 }

func (f *PasswordFile) find(user string) int {
	for i, line := range f.lines {
		if u, _, ok, _ := splitEntry(line); ok && u == user {
			return i
		}
	}
	return -1
}

// Bytes returns the file's contents, each line ended by a newline.
func (f *PasswordFile) Bytes() []byte {
	var b strings.Builder
	for _, line := range f.lines {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}
