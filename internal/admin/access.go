package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Access decides who may call the API. Credentials are either HTTP Basic, a user of the
// broker's password file whom the configuration names as an admin, or a Bearer token of
// the token file. With neither configured the API is open, which Open allows only on a
// loopback address (the same safe default as MQTT listeners): conf refuses an HTTP
// address off loopback with the API and no credentials. The users and the tokens are
// swapped whole by Set on a reload, so a call sees the old set or the new one.
type Access struct {
	check func(user string, password []byte) bool // verifies an admin's password (the password file)

	mu     sync.Mutex
	users  []string
	tokens Tokens
}

// NewAccess returns the access of the admin users and the tokens of tokenFile ("" for
// none); check verifies a user's password. A token file that does not load is the error.
func NewAccess(users []string, tokenFile string, check func(user string, password []byte) bool) (*Access, error) {
	t, err := ReadTokens(tokenFile)
	if err != nil {
		return nil, err
	}
	a := &Access{check: check}
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
		return Tokens{}, fmt.Errorf("admin: token file: %w", err)
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
			return Tokens{}, fmt.Errorf("admin: token file %s:%d: want \"name token\", the token 16 characters or more", path, n)
		}
		t.byHash[sha256.Sum256([]byte(tok))] = name
	}
	if err := sc.Err(); err != nil {
		return Tokens{}, fmt.Errorf("admin: token file %s: %w", path, err)
	}
	return t, nil
}

// An AccessDiff is what Set changed, by name only: users, and the names of tokens added,
// removed, or whose token changed. It never holds a token.
type AccessDiff struct {
	UsersAdded, UsersRemoved                  []string
	TokensAdded, TokensRemoved, TokensChanged []string
	OldTokens, NewTokens                      []string // the names before and after, sorted
}

// Empty reports whether nothing changed.
func (d AccessDiff) Empty() bool {
	return len(d.UsersAdded)+len(d.UsersRemoved)+len(d.TokensAdded)+len(d.TokensRemoved)+len(d.TokensChanged) == 0
}

// Set puts users and t in force for the calls that follow, and returns what changed.
func (a *Access) Set(users []string, t Tokens) AccessDiff {
	users = slices.Clone(users)
	a.mu.Lock()
	oldUsers, oldTokens := a.users, a.tokens
	a.users, a.tokens = users, t
	a.mu.Unlock()
	var d AccessDiff
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
func (a *Access) Open() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.users) == 0 && a.tokens.file == ""
}

var errNoCredentials = errors.New("credentials required: HTTP Basic with an admin user, or a Bearer token")

// who authenticates r and returns the caller's name for the audit log.
func (a *Access) who(r *http.Request) (string, error) {
	a.mu.Lock()
	users, tokens := a.users, a.tokens
	a.mu.Unlock()
	if len(users) == 0 && tokens.file == "" {
		return "anonymous (loopback)", nil
	}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		sum := sha256.Sum256([]byte(strings.TrimSpace(h[len("Bearer "):])))
		for k, name := range tokens.byHash { // constant time per token: no early exit on a prefix
			if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
				return "token:" + name, nil
			}
		}
		return "", errors.New("unknown token")
	}
	if user, pass, ok := r.BasicAuth(); ok {
		if !slices.Contains(users, user) || a.check == nil || !a.check(user, []byte(pass)) {
			return "", errors.New("bad user name or password, or not an admin")
		}
		return "user:" + user, nil
	}
	return "", errNoCredentials
}
