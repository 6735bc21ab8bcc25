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
	"strings"
	"sync"
)

// Access decides who may call the API. Credentials are either HTTP Basic, a user of the
// broker's password file whom the configuration names as an admin, or a Bearer token of
// the token file. With neither configured the API is open, which Open allows only on a
// loopback address (the same safe default as MQTT listeners): conf refuses an HTTP
// address off loopback with the API and no credentials.
type Access struct {
	// Users are the admin users; Check verifies their passwords (the password file).
	Users []string
	Check func(user string, password []byte) bool
	// TokenFile holds one token per line: "name token" (name for the audit log).
	TokenFile string

	mu     sync.Mutex
	tokens map[[32]byte]string // sha256 of a token → its name
}

// Load reads the token file; call it at start and on reload. On error the tokens in
// force stay.
func (a *Access) Load() error {
	if a.TokenFile == "" {
		return nil
	}
	data, err := os.ReadFile(a.TokenFile)
	if err != nil {
		return fmt.Errorf("admin: token file: %w", err)
	}
	tokens := map[[32]byte]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, tok, ok := strings.Cut(line, " ")
		tok = strings.TrimSpace(tok)
		if !ok || name == "" || len(tok) < 16 {
			return fmt.Errorf("admin: token file %s:%d: want \"name token\", the token 16 characters or more", a.TokenFile, n)
		}
		tokens[sha256.Sum256([]byte(tok))] = name
	}
	a.mu.Lock()
	a.tokens = tokens
	a.mu.Unlock()
	return nil
}

// Open reports whether the API needs no credentials.
func (a *Access) Open() bool { return len(a.Users) == 0 && a.TokenFile == "" }

var errNoCredentials = errors.New("credentials required: HTTP Basic with an admin user, or a Bearer token")

// who authenticates r and returns the caller's name for the audit log.
func (a *Access) who(r *http.Request) (string, error) {
	if a.Open() {
		return "anonymous (loopback)", nil
	}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		sum := sha256.Sum256([]byte(strings.TrimSpace(h[len("Bearer "):])))
		a.mu.Lock()
		defer a.mu.Unlock()
		for k, name := range a.tokens { // constant time per token: no early exit on a prefix
			if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
				return "token:" + name, nil
			}
		}
		return "", errors.New("unknown token")
	}
	if user, pass, ok := r.BasicAuth(); ok {
		if !slices.Contains(a.Users, user) || a.Check == nil || !a.Check(user, []byte(pass)) {
			return "", errors.New("bad user name or password, or not an admin")
		}
		return "user:" + user, nil
	}
	return "", errNoCredentials
}
