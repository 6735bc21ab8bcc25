package bifrost

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
)

// ConfigChange is one field a reconfiguration changed, or left for a restart: its YAML
// path, old and new value (secrets masked), and why it waits for a restart if it does.
type ConfigChange = conf.Change

// A Report says what Reconfigure did: the changes applied, and those that need a
// restart and were not applied.
type Report struct {
	Applied []ConfigChange `json:"applied"`
	Restart []ConfigChange `json:"restart"`
}

// WithConfigFile names the file the configuration came from, for Reload (SIGHUP and the
// admin API's POST /api/v1/reload) to read again.
func WithConfigFile(path string) Option {
	return func(b *Broker) { b.file = path }
}

// WithLogLevel gives the level of the logger passed with WithLogger, for Reconfigure to
// change when log.level does; without it, a logger of the embedder keeps its level.
func WithLogLevel(level *slog.LevelVar) Option {
	return func(b *Broker) { b.level = level }
}

// Reconfigure puts next in force on the running broker, as far as that can be done
// without a restart, and reports what changed. next is checked first, as New checks its
// config: an invalid one (or one that would expose anonymous clients to the network)
// changes nothing and comes back as the error. Otherwise every live change is applied
// and every change that needs a restart (store, cluster, http.address, memory.profile...)
// is reported and left as it is: the broker runs with next's live fields over the
// configuration it had, and a later Reconfigure reports the pending ones again until a
// restart. Mosquitto does the same on SIGHUP (applies what it can, logs the rest); the
// alternative, refusing the whole file, would make an operator who fixes a limit and
// also touches store.dir restart for both. The fields and how each takes effect:
// docs/admin.md, Live reconfiguration. The admin API's token file is read again at
// every call (reconfigure_admin.go). Calls are serialized. It needs a started
// broker (ErrNotStarted before Start, ErrClosed after Close).
func (b *Broker) Reconfigure(next *Config) (Report, error) {
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
	rep := Report{Applied: []ConfigChange{}, Restart: []ConfigChange{}} // JSON [], not null
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
func (b *Broker) applyAuth(target *conf.Config, changes []ConfigChange) error {
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
func (b *Broker) apply(cur, target *conf.Config) error {
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

// Reload reads the configuration file again (WithConfigFile) and Reconfigures the broker
// with it (which re-reads the admin token file), then re-reads the password, ACL and
// certificate files (ReloadFiles). Without a file it Reconfigures with the configuration
// in force, for the token file, then does the latter. cmd/bifrost calls it on SIGHUP,
// the admin API on POST /api/v1/reload. A file with an error changes nothing: the error
// names each problem as check-config does (file:line: field: message).
func (b *Broker) Reload() (Report, error) {
	next := b.running.Load()
	if b.file != "" {
		var err error
		if next, err = conf.Load(b.file); err != nil {
			return Report{Applied: []ConfigChange{}, Restart: []ConfigChange{}}, err // conf.Errors: every problem, file:line: field: message
		}
	}
	rep, err := b.Reconfigure(next)
	if err != nil {
		return rep, err
	}
	return rep, b.ReloadFiles()
}
