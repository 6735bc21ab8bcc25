package auth

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

func ptr[T any](v T) *T { return &v }

// passwdFile writes a password file with alice (bcrypt, "alice-pw"), mos (Mosquitto $7$,
// "secret") and sam (SCRAM, "sam-pw").
func passwdFile(t testing.TB) string {
	t.Helper()
	alice, err := HashPassword([]byte("alice-pw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	sam, _ := SCRAMRecord([]byte("sam-pw"), 4096)
	_, mos, _ := strings.Cut(mosquittoVector, ":")
	return writeTemp(t, "passwd", "alice:"+alice+"\nmos:"+mos+"\nsam:"+sam+"\n")
}

func req(user, pw string) *Request {
	return &Request{ClientID: "c", Username: user, HasUsername: true, Password: []byte(pw), HasPassword: true}
}

func TestAuthenticate(t *testing.T) {
	file := passwdFile(t)
	anon := &Request{ClientID: "c"}
	pwOnly := &Request{ClientID: "c", Password: []byte("x"), HasPassword: true}
	userOnly := &Request{ClientID: "c", Username: "alice", HasUsername: true}
	for _, tc := range []struct {
		name string
		c    conf.Auth
		r    *Request
		user string // the Result's username when err is nil
		err  error
	}{
		{"no file, anonymous", conf.Auth{}, anon, "", nil},
		{"no file, a username is not trusted", conf.Auth{}, req("alice", "x"), "", nil},
		{"no file, anonymous off", conf.Auth{AllowAnonymous: ptr(false)}, anon, "", ErrNotAuthorized},
		{"no file, anonymous off, username", conf.Auth{AllowAnonymous: ptr(false)}, req("alice", "x"), "", ErrBadCredentials},
		{"file, anonymous unset", conf.Auth{PasswordFile: file}, anon, "", ErrNotAuthorized},
		{"file, anonymous on", conf.Auth{PasswordFile: file, AllowAnonymous: ptr(true)}, anon, "", nil},
		{"bcrypt user", conf.Auth{PasswordFile: file}, req("alice", "alice-pw"), "alice", nil},
		{"bcrypt user, wrong password", conf.Auth{PasswordFile: file}, req("alice", "alice-pW"), "", ErrBadCredentials},
		{"mosquitto user", conf.Auth{PasswordFile: file}, req("mos", "secret"), "mos", nil},
		{"mosquitto user, wrong password", conf.Auth{PasswordFile: file}, req("mos", "Secret"), "", ErrBadCredentials},
		{"scram user, plain password", conf.Auth{PasswordFile: file}, req("sam", "sam-pw"), "sam", nil},
		{"scram user, wrong password", conf.Auth{PasswordFile: file}, req("sam", "sam-pw2"), "", ErrBadCredentials},
		{"unknown user", conf.Auth{PasswordFile: file}, req("mallory", "alice-pw"), "", ErrBadCredentials},
		{"unknown user, anonymous on", conf.Auth{PasswordFile: file, AllowAnonymous: ptr(true)}, req("mallory", "x"), "", ErrBadCredentials},
		{"username without password", conf.Auth{PasswordFile: file, AllowAnonymous: ptr(true)}, userOnly, "", ErrBadCredentials},
		{"password without username", conf.Auth{PasswordFile: file, AllowAnonymous: ptr(true)}, pwOnly, "", ErrBadCredentials},
		{"empty username", conf.Auth{PasswordFile: file}, req("", "x"), "", ErrBadCredentials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.c, quiet)
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Authenticate(tc.r)
			if err != tc.err {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && res.Username != tc.user {
				t.Fatalf("Username = %q, want %q", res.Username, tc.user)
			}
			// TryAuthenticate agrees whenever it answers.
			if qres, qerr, ok := a.TryAuthenticate(tc.r); ok && (qerr != err || qres != res) {
				t.Errorf("TryAuthenticate = %+v, %v; Authenticate = %+v, %v", qres, qerr, res, err)
			}
		})
	}
}

// TestTryAuthenticateNeverLooksUp checks the quick path never answers for a username and
// password it would have to check: its speed must not tell known users from unknown.
func TestTryAuthenticateNeverLooksUp(t *testing.T) {
	a, err := New(conf.Auth{PasswordFile: passwdFile(t), CacheSize: ptr(0)}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Request{req("alice", "alice-pw"), req("alice", "wrong"), req("mallory", "x")} {
		if _, _, ok := a.TryAuthenticate(r); ok {
			t.Errorf("TryAuthenticate answered for %q", r.Username)
		}
	}
}

func TestCache(t *testing.T) {
	file := passwdFile(t)
	a, err := New(conf.Auth{PasswordFile: file, CacheSize: ptr(2), CacheTTL: conf.Duration(time.Minute)}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	quick := func(user, pw string) bool {
		res, err, ok := a.TryAuthenticate(req(user, pw))
		if ok && (err != nil || res.Username != user) {
			t.Fatalf("cache hit with %+v, %v", res, err)
		}
		return ok
	}
	if quick("alice", "alice-pw") {
		t.Fatal("a hit before any login")
	}
	if _, err := a.Authenticate(req("alice", "wrong")); err == nil {
		t.Fatal("wrong password accepted")
	}
	if quick("alice", "wrong") {
		t.Fatal("a failure was cached")
	}
	if _, err := a.Authenticate(req("alice", "alice-pw")); err != nil {
		t.Fatal(err)
	}
	if !quick("alice", "alice-pw") {
		t.Fatal("a success was not cached")
	}
	if quick("alice", "alice-pW") || quick("alicE", "alice-pw") {
		t.Fatal("the cache answers for another password or user")
	}

	// The cache holds at most cache_size logins, dropping the oldest.
	for _, r := range []*Request{req("mos", "secret"), req("sam", "sam-pw")} {
		if _, err := a.Authenticate(r); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.state.Load().cache.len(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if quick("alice", "alice-pw") || !quick("mos", "secret") || !quick("sam", "sam-pw") {
		t.Fatal("the oldest login was not the one dropped")
	}

	// A reload starts an empty cache: a changed password takes effect at once.
	newer, _ := HashPassword([]byte("new-pw"), 4)
	if err := os.WriteFile(file, []byte("mos:"+newer+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if quick("mos", "secret") {
		t.Fatal("the cache survived a reload")
	}
	if _, err := a.Authenticate(req("mos", "secret")); err == nil {
		t.Fatal("the old password still works after the reload")
	}
}

func TestCacheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(conf.Auth{PasswordFile: passwdFile(t), CacheTTL: conf.Duration(time.Minute)}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(req("alice", "alice-pw")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second)
		if _, _, ok := a.TryAuthenticate(req("alice", "alice-pw")); !ok {
			t.Fatal("expired early")
		}
		time.Sleep(2 * time.Second)
		if _, _, ok := a.TryAuthenticate(req("alice", "alice-pw")); ok {
			t.Fatal("still cached after the TTL")
		}
	})
}

func TestCacheOff(t *testing.T) {
	a, err := New(conf.Auth{PasswordFile: passwdFile(t), CacheSize: ptr(0)}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(req("alice", "alice-pw")); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.TryAuthenticate(req("alice", "alice-pw")); ok {
		t.Fatal("cache_size 0 still caches")
	}
}

// TestReloadKeepsStateOnError checks a broken file leaves the running state in force and
// the error names the file and line.
func TestReloadKeepsStateOnError(t *testing.T) {
	pw := passwdFile(t)
	aclFile := writeTemp(t, "acl", "user alice\ntopic read a/#\n")
	a, err := New(conf.Auth{PasswordFile: pw, ACLFile: aclFile}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aclFile, []byte("user alice\ntopic raed a/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = a.Reload()
	if err == nil || !strings.Contains(err.Error(), aclFile+":2: topic: access \"raed\"") {
		t.Fatalf("Reload() = %v, want an error naming %s:2", err, aclFile)
	}
	if !a.Allow("alice", "c", Read, "a/b") {
		t.Error("the old ACL is not in force after a failed reload")
	}
	if _, err := a.Authenticate(req("alice", "alice-pw")); err != nil {
		t.Errorf("the old passwords are not in force: %v", err)
	}

	// Apply switches files; a missing one is an error naming it.
	err = a.Apply(conf.Auth{PasswordFile: pw + ".missing"})
	if err == nil || !strings.Contains(err.Error(), pw+".missing") {
		t.Fatalf("Apply() = %v", err)
	}
	if err := a.Apply(conf.Auth{}); err != nil {
		t.Fatal(err)
	}
	if !a.Allow("bob", "c", Write, "anything") {
		t.Error("without an ACL file everything is allowed")
	}
	if _, err := New(conf.Auth{ACLFile: aclFile + ".missing"}, quiet); err == nil {
		t.Error("New with a missing ACL file succeeded")
	}
}

// TestNoSecretsInLogs runs loads, reloads, logins and SCRAM exchanges, failing and
// succeeding, at debug level, and checks no password, hash or proof reaches the log.
func TestNoSecretsInLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pw := passwdFile(t)
	data, _ := os.ReadFile(pw)
	a, err := New(conf.Auth{PasswordFile: pw, ACLFile: writeTemp(t, "acl", "pattern read x/#\n")}, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Request{req("alice", "alice-pw"), req("alice", "guess-1"), req("mallory", "guess-2")} {
		_, _ = a.Authenticate(r)
	}
	cc := scramClient(t, "sam", "sam-pw").NewConversation()
	_, _, _ = converse(t, a.Methods()[0], &Request{}, cc)
	_ = a.Reload()
	if err := os.WriteFile(pw, append(data, []byte("bad:plain-secret\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("a plain-text password was accepted")
	} else if strings.Contains(err.Error(), "plain-secret") {
		t.Errorf("the error quotes the password: %v", err)
	}
	out := buf.String()
	secrets := []string{"alice-pw", "guess-1", "guess-2", "sam-pw", "plain-secret", "$2a$", "$7$", "$scram", "p=", "v="}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		_, h, _ := strings.Cut(line, ":")
		secrets = append(secrets, h)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the log holds %q:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "password file loaded") {
		t.Errorf("the log is not being written:\n%s", out)
	}
}

func TestSet(t *testing.T) {
	pw := passwdFile(t)
	c := conf.Default()
	c.Listeners[1].Auth = &conf.Auth{PasswordFile: pw, ACLFile: writeTemp(t, "acl", "user alice\ntopic read a/#\n")}
	s, err := NewSet(c, quiet)
	if err != nil {
		t.Fatal(err)
	}
	mqtt, ws := c.Listeners[0].Name, c.Listeners[1].Name
	if s.For(mqtt) == s.For(ws) || s.For("unknown") != s.For(mqtt) {
		t.Fatal("For does not tell the listeners apart")
	}
	// The top-level block admits anonymous clients; the ws listener's does not.
	anon := &Request{ClientID: "c", Listener: mqtt}
	if _, err := s.Authenticate(anon); err != nil {
		t.Errorf("anonymous on %s: %v", mqtt, err)
	}
	anon.Listener = ws
	if _, err := s.Authenticate(anon); err != ErrNotAuthorized {
		t.Errorf("anonymous on %s: %v, want ErrNotAuthorized", ws, err)
	}
	r := req("alice", "alice-pw")
	r.Listener = ws
	if res, err := s.Authenticate(r); err != nil || res.Username != "alice" {
		t.Errorf("alice on %s: %+v, %v", ws, res, err)
	}
	if !s.For(ws).Allow("alice", "c", Read, "a/b") || s.For(ws).Allow("alice", "c", Read, "b") || !s.For(mqtt).Allow("alice", "c", Read, "b") {
		t.Error("the ACLs are not per listener")
	}
	ms := s.Methods()
	if len(ms) != 1 {
		t.Fatalf("Methods() = %v", ms)
	}
	if _, err, _ := converse(t, ms[0], &Request{Listener: ws}, scramClient(t, "sam", "sam-pw").NewConversation()); err != nil {
		t.Errorf("SCRAM on %s: %v", ws, err)
	}
	if _, err, _ := converse(t, ms[0], &Request{Listener: mqtt}, scramClient(t, "sam", "sam-pw").NewConversation()); !errors.Is(err, ErrNotAuthorized) {
		t.Errorf("SCRAM on %s, which has no password file: %v", mqtt, err)
	}

	next := c.Clone()
	next.Auth.AllowAnonymous = ptr(false)
	next.Auth.PasswordFile = pw
	if err := s.Apply(next); err != nil {
		t.Fatal(err)
	}
	anon.Listener = mqtt
	if _, err := s.Authenticate(anon); err != ErrNotAuthorized {
		t.Errorf("after Apply, anonymous on %s: %v", mqtt, err)
	}
	// A block whose file does not load stops the whole Apply: the top-level block,
	// whose change loads, is not put in force either.
	broken := c.Clone()
	broken.Listeners[1].Auth.PasswordFile = pw + ".missing"
	if err := s.Apply(broken); err == nil || !strings.Contains(err.Error(), ".missing") {
		t.Fatalf("Apply with a missing file: %v", err)
	}
	if _, err := s.Authenticate(anon); err != ErrNotAuthorized {
		t.Errorf("after a failed Apply, anonymous on %s: %v; want the previous block's refusal", mqtt, err)
	}
	next = next.Clone()
	next.Listeners[1].Auth = nil
	if err := s.Apply(next); err == nil {
		t.Error("Apply accepted a listener losing its auth block")
	}
	if err := s.Reload(); err != nil {
		t.Error(err)
	}

	c.Listeners[0].Auth = &conf.Auth{PasswordFile: pw + ".missing"}
	if _, err := NewSet(c, quiet); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("listener %s", mqtt)) {
		t.Errorf("NewSet with a missing file: %v", err)
	}
}

// TestCacheTagsKeepFieldsApart checks a cached login cannot be replayed by moving bytes
// between username and password.
func TestCacheTagsKeepFieldsApart(t *testing.T) {
	c := newCache(8, time.Minute)
	c.add("ab", []byte("c"))
	if !c.hit("ab", []byte("c")) {
		t.Fatal("no hit for the login itself")
	}
	if c.hit("a", []byte("bc")) || c.hit("abc", nil) || c.hit("", []byte("abc")) {
		t.Fatal("a login with the same bytes split elsewhere hits")
	}
}

// TestConcurrentReload checks, under -race, that checks running while files are reloaded
// see one snapshot or the other.
func TestConcurrentReload(t *testing.T) {
	aclFile := writeTemp(t, "acl", "user alice\ntopic read a/#\n")
	a, err := New(conf.Auth{PasswordFile: passwdFile(t), ACLFile: aclFile, CacheSize: ptr(4)}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if !a.Allow("alice", "c", Read, "a/b") || a.Allow("alice", "c", Write, "a/b") {
					errs <- errors.New("a check saw neither snapshot")
					return
				}
				_, _, _ = a.TryAuthenticate(req("mos", "secret"))
			}
		}()
	}
	for range 20 {
		if err := a.Reload(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(req("mos", "secret")); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
