package auth

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// A Set holds the Auth of every listener of a configuration: one for the top-level auth
// block, shared by the listeners without a block of their own, and one per listener with
// its own block. Authenticate, TryAuthenticate and the SCRAM method dispatch on
// Request.Listener; topic checks (which carry no listener) go through For.
type Set struct {
	top *Auth
	own map[string]*Auth // by listener name
}

// NewSet builds the Set of c, a configuration as conf.Parse returns it.
func NewSet(c *conf.Config, log *slog.Logger) (*Set, error) {
	top, err := New(c.Auth, log)
	if err != nil {
		return nil, err
	}
	s := &Set{top: top, own: map[string]*Auth{}}
	var errs []error
	for _, l := range c.Listeners {
		if l.Auth == nil {
			continue
		}
		a, err := New(*l.Auth, log)
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", l.Name, err))
			continue
		}
		s.own[l.Name] = a
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// For returns the Auth in force on the named listener.
func (s *Set) For(listener string) *Auth {
	if a, ok := s.own[listener]; ok {
		return a
	}
	return s.top
}

// Reload re-reads every Auth's files. Each Auth keeps its old state on error; the errors
// of all come back together.
func (s *Set) Reload() error {
	errs := []error{s.top.Reload()}
	for name, a := range s.own {
		if err := a.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Apply puts the auth blocks of c, a reloaded configuration, in force. Which listeners
// have their own block cannot change without a restart (conf.Config.Changes says so); a
// listener that gained or lost one is an error here. Every block's files are read before
// any is put in force: on error nothing changes.
func (s *Set) Apply(c *conf.Config) error {
	type step struct {
		a    *Auth
		c    conf.Auth
		name string
	}
	steps := []step{{s.top, c.Auth, ""}}
	var errs []error
	seen := 0
	for _, l := range c.Listeners {
		a, ok := s.own[l.Name]
		switch {
		case ok != (l.Auth != nil):
			errs = append(errs, fmt.Errorf("auth: listener %s: adding or removing an auth block needs a restart", l.Name))
		case ok:
			seen++
			steps = append(steps, step{a, *l.Auth, l.Name})
		}
	}
	if seen != len(s.own) {
		errs = append(errs, errors.New("auth: a listener with its own auth block is gone; that needs a restart"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Each Auth's lock, in config order (Reload takes one at a time), holds off a
	// Reload between the reads and the swap.
	states := make([]*state, len(steps))
	for i, st := range steps {
		st.a.mu.Lock()
		defer st.a.mu.Unlock()
		ns, err := load(st.c, st.a.key[:], st.a.log)
		if err != nil && st.name != "" {
			err = fmt.Errorf("listener %s: %w", st.name, err)
		}
		errs = append(errs, err)
		states[i] = ns
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, st := range steps {
		st.a.state.Store(states[i])
	}
	return nil
}

// Authenticate decides a CONNECT with the Auth of its listener.
func (s *Set) Authenticate(r *Request) (Result, error) {
	return s.For(r.Listener).Authenticate(r)
}

// TryAuthenticate decides a CONNECT with the Auth of its listener, when that can be done
// at once.
func (s *Set) TryAuthenticate(r *Request) (res Result, err error, ok bool) {
	return s.For(r.Listener).TryAuthenticate(r)
}

// Methods returns SCRAM-SHA-256, served by the Auth of each exchange's listener, when
// any listener has a password file.
func (s *Set) Methods() []Method {
	if s.top.state.Load().users == nil {
		any := false
		for _, a := range s.own {
			any = any || a.state.Load().users != nil
		}
		if !any {
			return nil
		}
	}
	return []Method{setSCRAM{s}}
}

// setSCRAM starts each exchange on the Auth of the request's listener. A listener without
// a password file refuses the exchange (ErrNotAuthorized).
type setSCRAM struct{ s *Set }

func (setSCRAM) Name() string { return ScramSHA256 }

func (m setSCRAM) Start(r *Request) Exchange {
	var name string
	if r != nil {
		name = r.Listener
	}
	return scramMethod{m.s.For(name)}.Start(r)
}

var (
	_ Authenticator = (*Set)(nil)
	_ Quick         = (*Set)(nil)
)
