package auth

import (
	"crypto/sha256"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// Request is what a client presents at CONNECT.
type Request struct {
	ClientID    string
	Username    string
	HasUsername bool
	Password    []byte
	HasPassword bool
	Remote      string // the peer address
	Listener    string // the listener's name
}

// Result is who the client is once authenticated; Username is the ACL identity (%u), ""
// for an anonymous client.
type Result struct{ Username string }

// The errors an authentication ends with; the broker chooses the CONNACK code with
// errors.Is.
var (
	// ErrBadCredentials refuses a username/password that do not check out: v5 0x86, v3
	// return code 4.
	ErrBadCredentials = errors.New("auth: bad user name or password")
	// ErrNotAuthorized refuses a client that may not connect at all, such as an anonymous
	// one where anonymous access is off: v5 0x87, v3 return code 5.
	ErrNotAuthorized = errors.New("auth: not authorized")
)

// Authenticator decides a CONNECT. Authenticate may block (a slow hash): the broker calls
// it on a small pool of auth goroutines, never on the event loop.
type Authenticator interface {
	Authenticate(r *Request) (Result, error)
}

// Quick is implemented by authenticators that can often decide without blocking (anonymous
// access, a cache hit); ok=false means "call Authenticate". TryAuthenticate runs on an
// event loop, which lends it r: it must not keep r, or its Password, past the call.
type Quick interface {
	TryAuthenticate(r *Request) (res Result, err error, ok bool)
}

// Method is a v5 enhanced authentication method (the CONNECT's Authentication Method).
type Method interface {
	Name() string // e.g. "SCRAM-SHA-256"
	Start(r *Request) Exchange
}

// Exchange is one enhanced-authentication conversation. Step consumes the client's
// Authentication Data (from CONNECT, then each AUTH 0x18) and returns the server's: done
// reports success (out then goes in the CONNACK or the AUTH 0x00); err refuses
// (ErrBadCredentials or ErrNotAuthorized). Step may block; it is called on the auth pool,
// one step at a time.
type Exchange interface {
	Step(in []byte) (out []byte, done bool, res Result, err error)
}

// Access is what a client wants to do with a topic.
type Access uint8

// The kinds of Access. Read and Write are also the bits a rule grants.
const (
	Read      Access = 1 << iota // receive a message published to a topic name
	Write                        // publish to a topic name (a will included)
	Subscribe                    // subscribe to a filter; read rules grant it
)

// Authorizer decides topic access. Allow gets a topic name for Read/Write and a filter for
// Subscribe (already stripped of "$share/group/"). It is called on the event loop: it
// must be fast (no I/O, no allocation on the common path), and it must not keep topic
// past the call: the broker lends it from the packet's read buffer.
type Authorizer interface {
	Allow(username, clientID string, a Access, topic string) bool
}

// Covering reports, for a filter the client may subscribe to, whether every topic it can
// match is readable, so the broker can skip a Read check per delivered message (false:
// check each delivery).
type Covering interface {
	Covers(username, clientID, filter string) bool
}

// Auth is one auth configuration (the top-level auth block, or a listener's) in force:
// who may connect, with which password, and what each client may touch. It implements
// Authenticator, Quick, Authorizer and Covering, and offers SCRAM-SHA-256 through Methods.
//
// Its state (the parsed files and the login cache) is an immutable snapshot swapped
// atomically by Reload and Apply: a check in progress finishes on the snapshot it
// started with, and readers take no lock.
type Auth struct {
	log   *slog.Logger
	key   [32]byte   // random, for SCRAM's stand-in salts; fixed for the Auth's life
	mu    sync.Mutex // serializes Reload and Apply
	state atomic.Pointer[state]
}

// state is one snapshot of an Auth.
type state struct {
	c         conf.Auth
	anonymous bool       // clients without a username may connect
	users     *passwords // nil: no password file
	acl       *acl       // nil: no ACL file, everything allowed
	cache     *cache     // nil: no password file, or the cache is off
	key       []byte     // the Auth's key
	// sums are the SHA-256 of the password and ACL file contents in force, by FileKind
	// (files.go); zero for a file the block does not name.
	sums [numKinds][sha256.Size]byte
}

// New builds the configured authenticator/authorizer set from c: anonymous access allowed
// or not, password file, ACL file. c is a block as conf.Config.EnsureDefaults leaves it;
// conf.Config.ListenerAuth gives the block in force on a listener. Errors name the file
// and line. log may be nil.
func New(c conf.Auth, log *slog.Logger) (*Auth, error) {
	if log == nil {
		log = slog.Default()
	}
	a := &Auth{log: log}
	randomKey(a.key[:])
	s, err := load(c, a.key[:], log)
	if err != nil {
		return nil, err
	}
	a.state.Store(s)
	return a, nil
}

// Reload re-reads the password and ACL files (SIGHUP). On error the old state stays in
// force and the error says why; on success the login cache starts empty, so a removed
// user or a changed password takes effect at once for new CONNECTs. Connected clients
// are not re-checked: disconnecting them is the broker's decision.
func (a *Auth) Reload() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.apply(a.state.Load().c)
}

// Apply puts a new auth block in force (a configuration reload), reading its files; on
// error the old state stays.
func (a *Auth) Apply(c conf.Auth) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.apply(c)
}

func (a *Auth) apply(c conf.Auth) error {
	s, err := load(c, a.key[:], a.log)
	if err != nil {
		return err
	}
	a.state.Store(s)
	return nil
}

// load reads the files c names into a new state.
func load(c conf.Auth, key []byte, log *slog.Logger) (*state, error) {
	var data [numKinds][]byte
	var errs []error
	for k := range numKinds {
		if path := k.path(c); path != "" {
			d, err := readFile(k.String(), path)
			errs = append(errs, err)
			data[k] = d
		}
	}
	// A file that does not read leaves data nil: the other is still parsed, so that every
	// problem is reported at once.
	s := &state{c: c, anonymous: c.Anonymous(), key: key}
	errs = append(errs, s.parse(data, "", log))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// parse puts in s the contents of the files its block names that data holds (nil: keep
// what s has); from, when set, says where the contents came from for errors and logs.
// On error s may be partly changed, so callers parse into a state not yet in force.
func (s *state) parse(data [numKinds][]byte, from string, log *slog.Logger) error {
	var errs []error
	if p := s.c.PasswordFile; p != "" && data[KindPassword] != nil {
		u, err := parsePasswords(label(p, from), data[KindPassword])
		if err != nil {
			errs = append(errs, err)
		} else {
			s.users, s.cache = u, nil
			s.sums[KindPassword] = sha256.Sum256(data[KindPassword])
			log.Info("auth: password file loaded", "file", p, "from", fromOrFile(from), "users", len(u.byName))
			if n := cacheSize(s.c); n > 0 {
				s.cache = newCache(n, cacheTTL(s.c))
			}
		}
	}
	if p := s.c.ACLFile; p != "" && data[KindACL] != nil {
		l, err := parseACL(label(p, from), data[KindACL], log)
		if err != nil {
			errs = append(errs, err)
		} else {
			s.acl = l
			s.sums[KindACL] = sha256.Sum256(data[KindACL])
			log.Info("auth: ACL file loaded", "file", p, "from", fromOrFile(from), "rules", l.rules)
		}
	}
	return errors.Join(errs...)
}

// label names a file's contents in errors: its path, and where they came from if not
// from it.
func label(path, from string) string {
	if from == "" {
		return path
	}
	return path + " (" + from + ")"
}

func fromOrFile(from string) string {
	if from == "" {
		return "file"
	}
	return from
}

// Defaults of the login cache for a block that did not go through conf.EnsureDefaults.
const (
	defaultCacheSize = 4096
	defaultCacheTTL  = 2 * time.Minute
)

func cacheSize(c conf.Auth) int {
	if c.CacheSize == nil {
		return defaultCacheSize
	}
	return *c.CacheSize
}

func cacheTTL(c conf.Auth) time.Duration {
	if c.CacheTTL <= 0 {
		return defaultCacheTTL
	}
	return time.Duration(c.CacheTTL)
}

// Authenticate decides a CONNECT, verifying a password against its hash when it must:
// the slow path, for the auth pool.
func (a *Auth) Authenticate(r *Request) (Result, error) {
	s := a.state.Load()
	if res, err, ok := s.quick(r); ok {
		return res, err
	}
	return s.verify(r)
}

// TryAuthenticate decides a CONNECT when it can without hashing: anonymous access,
// credentials that cannot be right whoever the user is, and logins in the cache. It never
// answers for a username it would have to look up, so that its speed tells nothing about
// which users exist.
func (a *Auth) TryAuthenticate(r *Request) (res Result, err error, ok bool) {
	return a.state.Load().quick(r)
}

func (s *state) quick(r *Request) (res Result, err error, ok bool) {
	switch {
	case s.users == nil:
		// Without a password file nothing can be checked, so a username carries no rights:
		// the client is anonymous (the ACL's anonymous rules; %u never matches). Trusting
		// it would let any client claim any user's ACL entry.
		if s.anonymous {
			return Result{}, nil, true
		}
		if r.HasUsername || r.HasPassword {
			return Result{}, ErrBadCredentials, true
		}
		return Result{}, ErrNotAuthorized, true
	case !r.HasUsername:
		if r.HasPassword { // v5 allows a password alone; there is no user to check it for
			return Result{}, ErrBadCredentials, true
		}
		if s.anonymous {
			return Result{}, nil, true
		}
		return Result{}, ErrNotAuthorized, true
	case !r.HasPassword:
		return Result{}, ErrBadCredentials, true
	case s.cache != nil && s.cache.hit(r.Username, r.Password):
		return Result{Username: r.Username}, nil, true
	}
	return Result{}, nil, false
}

// verify checks a username and password against the password file. An unknown user costs
// the same hash as a known one (the dummy credential), so that timing does not tell which
// users exist.
func (s *state) verify(r *Request) (Result, error) {
	c, known := s.users.byName[r.Username]
	if !known {
		c = s.users.dummy
	}
	if !c.verify(r.Password) || !known {
		return Result{}, ErrBadCredentials
	}
	if s.cache != nil {
		s.cache.add(r.Username, r.Password)
	}
	return Result{Username: r.Username}, nil
}

// Allow reports whether a client may do a to topic; see Authorizer. Without an ACL file
// everything is allowed.
func (a *Auth) Allow(username, clientID string, acc Access, topic string) bool {
	l := a.state.Load().acl
	return l == nil || l.allow(username, clientID, acc, topic)
}

// Covers reports whether every topic filter can match is readable by the client; see
// Covering. Without an ACL file everything is.
func (a *Auth) Covers(username, clientID, filter string) bool {
	l := a.state.Load().acl
	return l == nil || l.covers(username, clientID, filter)
}

// Methods returns the enhanced authentication methods on offer: SCRAM-SHA-256 when a
// password file is in force, else none. The list is fixed when called; a reload that
// adds or removes the password file changes what a later call returns.
func (a *Auth) Methods() []Method {
	if a.state.Load().users == nil {
		return nil
	}
	return []Method{scramMethod{a}}
}

var (
	_ Authenticator = (*Auth)(nil)
	_ Quick         = (*Auth)(nil)
	_ Authorizer    = (*Auth)(nil)
	_ Covering      = (*Auth)(nil)
)
