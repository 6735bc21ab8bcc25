package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
)

// AdminAccess decides who may call the admin API (internal/admin, which reads the
// credentials off the request). Credentials are either a user of the broker's password
// file whom the configuration names as an admin, or a token of the token file. With
// neither configured the API is open, which the endpoint allows only on a loopback
// address (the same safe default as MQTT listeners). The users and the tokens are
// swapped whole by Set on a reload, so a call sees the old set or the new one. It lives
// here, not in the API's package, so that the server applies a reload to it without
// linking the HTTP code.
type AdminAccess struct {
	check func(user string, password []byte) bool // verifies an admin's password (the password file)

	mu     sync.Mutex
	users  []string
	tokens Tokens
}

// NewAdminAccess returns the access of the admin users and the tokens of tokenFile (""
// for none); check verifies a user's password. A token file that does not load is the
// error.
func NewAdminAccess(users []string, tokenFile string, check func(user string, password []byte) bool) (*AdminAccess, error) {
	t, err := ReadTokens(tokenFile)
	if err != nil {
		return nil, err
	}
	a := &AdminAccess{check: check}
	a.Set(users, t)
	return a, nil
}

// Tokens are the tokens of a token file, read by ReadTokens; only their names and their
// SHA-256 are kept.
type Tokens struct {
	file   string
	byHash map[[32]byte]string // sha256 of a token → its name
}

// ReadTokens reads a token file: one "name token" a line (name for the audit log), the
// token 16 characters or more; blank lines and lines starting with # are skipped. An
// empty path is no tokens.
func ReadTokens(path string) (Tokens, error) {
	t := Tokens{file: path, byHash: map[[32]byte]string{}}
	if path == "" {
		return t, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Tokens{}, fmt.Errorf("auth: admin token file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, tok, ok := strings.Cut(line, " ")
		tok = strings.TrimSpace(tok)
		if !ok || name == "" || len(tok) < 16 {
			return Tokens{}, fmt.Errorf("auth: admin token file %s:%d: want \"name token\", the token 16 characters or more", path, n)
		}
		t.byHash[sha256.Sum256([]byte(tok))] = name
	}
	if err := sc.Err(); err != nil {
		return Tokens{}, fmt.Errorf("auth: admin token file %s: %w", path, err)
	}
	return t, nil
}

// An AdminDiff is what Set changed, by name only: users, and the names of tokens added,
// removed, or whose token changed. It never holds a token.
type AdminDiff struct {
	UsersAdded, UsersRemoved                  []string
	TokensAdded, TokensRemoved, TokensChanged []string
	OldTokens, NewTokens                      []string // the names before and after, sorted
}

// Empty reports whether nothing changed.
func (d AdminDiff) Empty() bool {
	return len(d.UsersAdded)+len(d.UsersRemoved)+len(d.TokensAdded)+len(d.TokensRemoved)+len(d.TokensChanged) == 0
}

// Set puts users and t in force for the calls that follow, and returns what changed.
func (a *AdminAccess) Set(users []string, t Tokens) AdminDiff {
	users = slices.Clone(users)
	a.mu.Lock()
	oldUsers, oldTokens := a.users, a.tokens
	a.users, a.tokens = users, t
	a.mu.Unlock()
	var d AdminDiff
	d.UsersAdded, d.UsersRemoved = added(oldUsers, users), added(users, oldUsers)
	oldNames, newNames := oldTokens.names(), t.names()
	for name := range newNames {
		if _, ok := oldNames[name]; !ok {
			d.TokensAdded = append(d.TokensAdded, name)
		}
	}
	for name, hashes := range oldNames {
		now, ok := newNames[name]
		switch {
		case !ok:
			d.TokensRemoved = append(d.TokensRemoved, name)
		case !slices.Equal(hashes, now):
			d.TokensChanged = append(d.TokensChanged, name)
		}
	}
	d.OldTokens, d.NewTokens = oldTokens.Names(), t.Names()
	sort.Strings(d.TokensAdded)
	sort.Strings(d.TokensRemoved)
	sort.Strings(d.TokensChanged)
	return d
}

// names maps each token name to the sorted hashes of its tokens.
func (t Tokens) names() map[string][][32]byte {
	out := map[string][][32]byte{}
	for h, name := range t.byHash {
		out[name] = append(out[name], h)
	}
	for _, hs := range out {
		slices.SortFunc(hs, func(x, y [32]byte) int { return bytes.Compare(x[:], y[:]) })
	}
	return out
}

// Names are the tokens' names, sorted, each once.
func (t Tokens) Names() []string {
	var out []string
	for name := range t.names() {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// added returns the elements of b that are not in a.
func added(a, b []string) []string {
	var out []string
	for _, s := range b {
		if !slices.Contains(a, s) {
			out = append(out, s)
		}
	}
	return out
}

// Open reports whether the API needs no credentials.
func (a *AdminAccess) Open() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.users) == 0 && a.tokens.file == ""
}

// Anonymous is who Who says made a call when no credentials are configured: the
// endpoint then asks more of the call (its Host must name the endpoint; internal/admin).
const Anonymous = "anonymous (loopback)"

// ErrNoCredentials is Who's error for a call that brings none.
var ErrNoCredentials = errors.New("credentials required: HTTP Basic with an admin user, or a Bearer token")

// Credentials are what a call to the admin API brings: a Bearer token, or a user and
// password (HTTP Basic).
type Credentials struct {
	Token          string
	HasToken       bool
	User, Password string
	HasUser        bool
}

// Who authenticates c and returns the caller's name for the audit log.
func (a *AdminAccess) Who(c Credentials) (string, error) {
	a.mu.Lock()
	users, tokens, check := a.users, a.tokens, a.check
	a.mu.Unlock()
	if len(users) == 0 && tokens.file == "" {
		return Anonymous, nil
	}
	if c.HasToken {
		sum := sha256.Sum256([]byte(c.Token))
		for k, name := range tokens.byHash { // constant time per token: no early exit on a prefix
			if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
				return "token:" + name, nil
			}
		}
		return "", errors.New("unknown token")
	}
	if c.HasUser {
		if !slices.Contains(users, c.User) || check == nil || !check(c.User, []byte(c.Password)) {
			return "", errors.New("bad user name or password, or not an admin")
		}
		return "user:" + c.User, nil
	}
	return "", ErrNoCredentials
}
