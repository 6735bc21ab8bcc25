package server

import (
	"errors"
	"fmt"
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
)

// A Report says what Reconfigure did: the changes applied, and those that need a
// restart and were not applied (package bifrost's Report, field for field).
type Report struct {
	Applied []conf.Change `json:"applied"`
	Restart []conf.Change `json:"restart"`
}

// Reconfigure puts next's live fields in force on the running server and leaves the
// rest for a restart, reporting both: package bifrost's Broker.Reconfigure documents it
// (the fields and how each takes effect: docs/admin.md, Live reconfiguration). The admin
// API's token file is read again at every call (reconfigure_admin.go). Calls are
// serialized.
func (b *Server) Reconfigure(next *conf.Config) (Report, error) {
	next = next.Clone()
	next.EnsureDefaults()
	if err := next.Validate(); err != nil {
		return Report{}, fmt.Errorf("bifrost: invalid config; nothing changed:\n%w", err)
	}
	b.reconf.Lock()
	defer b.reconf.Unlock()
	b.mu.Lock()
	started, closed := b.started, b.closed
	b.mu.Unlock()
	switch {
	case closed:
		return Report{}, ErrClosed
	case !started:
		return Report{}, ErrNotStarted
	}
	cur := b.running.Load()
	acc := b.admin.Load()
	rep := Report{Applied: []conf.Change{}, Restart: []conf.Change{}} // JSON [], not null
	for _, ch := range cur.Changes(next) {
		if acc == nil && strings.HasPrefix(ch.Field, "http.admin.") {
			ch.Restart = restartAdminOff
		}
		if ch.Restart == "" {
			rep.Applied = append(rep.Applied, ch)
		} else {
			rep.Restart = append(rep.Restart, ch)
		}
	}
	target := cur.Applied(next)
	if acc == nil {
		target.HTTP.Admin = cur.HTTP.Admin // left for the restart with the rest of http
	}
	if b.hook == nil {
		if err := target.CheckExposure(); err != nil {
			return Report{}, fmt.Errorf("bifrost: refusing to serve anonymous clients on the network; nothing changed:\n%w", err)
		}
	}
	tokens, err := b.readAdmin(target)
	if err != nil {
		return Report{}, err
	}
	if err := b.applyAuth(target, rep.Applied); err != nil {
		return Report{}, err
	}
	rep.Applied = append(rep.Applied, b.applyAdmin(target, tokens)...)
	err = b.apply(cur, target)
	b.running.Store(target)
	for _, ch := range rep.Applied {
		b.log.Info("reconfigure: applied", "change", ch.String())
	}
	for _, ch := range rep.Restart {
		b.log.Warn("reconfigure: needs a restart; not applied", "change", ch.String())
	}
	if len(rep.Applied)+len(rep.Restart) == 0 {
		b.log.Info("reconfigure: nothing changed")
	}
	if err != nil {
		b.log.Error("reconfigure: not all of it took effect", "err", err)
	}
	return rep, err
}

// applyAuth puts target's auth blocks in force when changes touch them, before anything
// else: a file that does not load stops the reconfiguration with nothing changed.
func (b *Server) applyAuth(target *conf.Config, changes []conf.Change) error {
	touched := false
	for _, ch := range changes {
		if strings.HasPrefix(ch.Field, "auth.") || strings.HasPrefix(ch.Field, "listeners[") && strings.Contains(ch.Field, "].auth.") {
			touched = true
		}
	}
	if !touched || b.auth == nil {
		return nil
	}
	if err := b.auth.Apply(target); err != nil {
		return fmt.Errorf("bifrost: auth files; nothing changed: %w", err)
	}
	b.mqtt.ACLChanged()
	return nil
}

// apply puts target's live fields other than auth in force, cur being the configuration
// in force. What fails (a listener that cannot bind its address) is reported; the rest
// takes effect.
func (b *Server) apply(cur, target *conf.Config) error {
	if b.level != nil && cur.Log.Level != target.Log.Level {
		if l, err := logging.ParseLevel(target.Log.Level); err == nil {
			b.level.Set(l)
		}
	}
	b.mu.Lock()
	pol := b.memory
	b.mu.Unlock()
	var errs []error
	if pol != nil && (cur.Memory.Limit != target.Memory.Limit || !sameDuration(cur.Memory.ReturnToOS, target.Memory.ReturnToOS)) {
		if err := pol.Reload(target.Memory); err != nil {
			errs = append(errs, fmt.Errorf("memory: %w", err))
		}
	}
	if err := b.mqtt.Reconfigure(target); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bifrost: reconfigure: %w", err)
	}
	return nil
}

func sameDuration(a, b *conf.Duration) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// Reload Reconfigures with the configuration file read again (Options.File; without one,
// with the configuration in force), then calls ReloadFiles: package bifrost's
// Broker.Reload. cmd/bifrost calls it on SIGHUP, the admin API on POST /api/v1/reload.
func (b *Server) Reload() (Report, error) {
	next := b.running.Load()
	if b.file != "" {
		var err error
		if next, err = conf.Load(b.file); err != nil {
			return Report{Applied: []conf.Change{}, Restart: []conf.Change{}}, err // conf.Errors: every problem, file:line: field: message
		}
	}
	rep, err := b.Reconfigure(next)
	if err != nil {
		return rep, err
	}
	return rep, b.ReloadFiles()
}
