package conf

import (
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
)

// liveFields are the YAML paths, or path prefixes ending in ".", that a running broker
// applies without a restart. Every other field needs one: it is bound into a socket
// (http), an open engine (store, cluster) or the shape of memory (memory.profile). A new
// field needs a restart until it is listed here, which is the safe way to be wrong.
// Listeners are judged by listenerChanges.
var liveFields = []string{
	"log.level",               // the logger's level is a slog.LevelVar
	"mqtt.",                   // told to and enforced on connections from the next CONNECT on
	"queue.offline_messages",  // bounds of sessions from their next CONNECT on
	"queue.offline_bytes",     // likewise
	"queue.when_full",         // read at every PUBLISH (the broker's limits snapshot)
	"queue.max_pause",         //
	"limits.max_connections",  // the broker's limits are one snapshot swapped atomically
	"limits.connect_rate",     //
	"limits.connect_burst",    //
	"limits.max_topic_length", //
	"limits.max_topic_levels", //
	"limits.max_subscriptions",
	"limits.publish_rate",
	"limits.publish_burst",
	"limits.auth_failures.", // the failure budget is part of that snapshot; the table keeps its sources
	"auth.",                 // the password and ACL files are re-read (not on a cluster node)
	"memory.limit",          // debug.SetMemoryLimit may be called at any time
	"memory.return_to_os",   // the memory policy's ticker is reset
	"sys_interval",          // the $SYS ticker is restarted
	"http.admin.",           // the admin API's users and tokens are swapped whole (internal/server's reconfigure_admin.go)
}

// Why a change waits for a restart, as the reload report says.
const (
	restartReason        = "takes effect only after a restart"
	restartClusterAuth   = "on a cluster node the auth blocks are the cluster's (replicated files); takes effect only after a restart"
	restartListenerRealm = "a listener with its own auth block added or removed; takes effect only after a restart"
)

// A Change is one field that differs between the running configuration and the next.
type Change struct {
	// Field is the YAML path; a listener is named by its name: listeners[mqtt].address,
	// or listeners[mqtt] for one added or removed as a whole.
	Field string `json:"field"`
	// Old is the running value, secrets masked: "(none)" for an absent block, "set" for
	// a present one, the length of a list of blocks.
	Old string `json:"old"`
	// New is the next value, shown as Old is.
	New string `json:"new"`
	// Restart is the reason the change is not applied live; "" when it is.
	Restart string `json:"restart,omitempty"`
}

// String formats the change as the reload log prints it: field: old → new, and the
// reason in parentheses when it waits for a restart.
func (ch Change) String() string {
	s := ch.Field + ": " + ch.Old + " → " + ch.New
	if ch.Restart != "" {
		s += " (" + ch.Restart + ")"
	}
	return s
}

// Changes lists what differs between c, the running configuration, and next, both as
// Parse returns them (defaults filled), each change marked live or needing a restart.
// Listeners are matched by name, so that a listener added, removed or changed is one
// entry per field rather than a shifted list.
func (c *Config) Changes(next *Config) []Change {
	var out []Change
	a, b := reflect.ValueOf(c).Elem(), reflect.ValueOf(next).Elem()
	for i := range a.NumField() {
		name, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("yaml"), ",")
		if name == "listeners" {
			continue
		}
		out = diff(name, a.Field(i), b.Field(i), out)
	}
	for i := range out {
		if !isLive(out[i].Field) {
			out[i].Restart = restartReason
		} else if c.Cluster != nil && strings.HasPrefix(out[i].Field, "auth.") {
			out[i].Restart = restartClusterAuth
		}
	}
	return append(out, c.listenerChanges(next)...)
}

// listenerChanges lists the listeners added, removed or changed, by name. A listener is
// live in all its fields except whether it has an auth block of its own (its realm, fixed
// at start); on a cluster node its auth block needs a restart as the top-level one does.
func (c *Config) listenerChanges(next *Config) []Change {
	var out []Change
	byName := func(ls []Listener, name string) *Listener {
		for i := range ls {
			if ls[i].Name == name {
				return &ls[i]
			}
		}
		return nil
	}
	whole := func(l *Listener) string {
		return l.Type + " " + l.Address
	}
	for i := range c.Listeners {
		old := &c.Listeners[i]
		path := "listeners[" + old.Name + "]"
		nl := byName(next.Listeners, old.Name)
		if nl == nil {
			ch := Change{Field: path, Old: whole(old), New: "(none)"}
			if old.Auth != nil {
				ch.Restart = restartListenerRealm
			}
			out = append(out, ch)
			continue
		}
		for _, ch := range diff(path, reflect.ValueOf(old).Elem(), reflect.ValueOf(nl).Elem(), nil) {
			switch {
			case ch.Field == path+".auth":
				ch.Restart = restartListenerRealm
			case c.Cluster != nil && strings.HasPrefix(ch.Field, path+".auth."):
				ch.Restart = restartClusterAuth
			}
			out = append(out, ch)
		}
	}
	for i := range next.Listeners {
		nl := &next.Listeners[i]
		if byName(c.Listeners, nl.Name) == nil {
			ch := Change{Field: "listeners[" + nl.Name + "]", Old: "(none)", New: whole(nl)}
			if nl.Auth != nil {
				ch.Restart = restartListenerRealm
			}
			out = append(out, ch)
		}
	}
	return out
}

// Reloadable compares c, the running configuration, with next, both as Parse returns
// them, and lists the changed fields that can be applied live, as Changes names them.
// When a changed field needs a restart, err is an *Errors naming each such field.
func (c *Config) Reloadable(next *Config) (changed []string, err error) {
	var restart errorList
	for _, ch := range c.Changes(next) {
		if ch.Restart == "" {
			changed = append(changed, ch.Field)
		} else {
			restart.add(ch.Field, "changed; %s", ch.Restart)
		}
	}
	return changed, restart.err()
}

func isLive(path string) bool {
	for _, f := range liveFields {
		if path == f || (strings.HasSuffix(f, ".") && strings.HasPrefix(path, f)) {
			return true
		}
	}
	return false
}

// secretKeys are the YAML keys whose values a Change masks, wherever they are.
var secretKeys = map[string]bool{"secret": true, "remote_password": true}

// secret reports whether the field at path holds a secret.
func secret(path string) bool {
	key := path[strings.LastIndexByte(path, '.')+1:]
	return secretKeys[key]
}

// diff appends to out the fields where a and b differ, down to single values, except that
// lists of different lengths differ as a whole and a block present on one side only is
// one change.
func diff(path string, a, b reflect.Value, out []Change) []Change {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			name, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("yaml"), ",")
			if name == "-" {
				continue // not in the file
			}
			if path != "" {
				name = path + "." + name
			}
			out = diff(name, a.Field(i), b.Field(i), out)
		}
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				out = append(out, Change{Field: path, Old: show(path, a), New: show(path, b)})
			}
			return out
		}
		out = diff(path, a.Elem(), b.Elem(), out)
	case reflect.Slice:
		if a.Len() != b.Len() {
			return append(out, Change{Field: path, Old: show(path, a), New: show(path, b)})
		}
		for i := range a.Len() {
			out = diff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), out)
		}
	default:
		if !a.Equal(b) {
			out = append(out, Change{Field: path, Old: show(path, a), New: show(path, b)})
		}
	}
	return out
}

// show formats a value for a Change: "(none)" for an absent block, "set" for a present
// one, the length of a list of blocks (whose secrets it would otherwise show), "***" for
// a secret.
func show(path string, v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "(none)"
		}
		if v.Elem().Kind() == reflect.Struct {
			return "set"
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct {
		return fmt.Sprintf("%d entries", v.Len())
	}
	if secret(path) && !v.IsZero() {
		return "***"
	}
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprint(v.Interface())
}

// A Holder holds the running configuration as an immutable snapshot, swapped atomically
// on reload (as nats-server does). Readers Load the snapshot once per operation and never
// modify it; a writer builds the next one (Parse, or Clone and change), then Reload or
// Swap. The zero Holder holds nil. Its methods are safe for concurrent use.
type Holder struct {
	// Pointer holds the snapshot: Load reads it, Store and Swap replace it without the
	// checks Reload makes.
	atomic.Pointer[Config]
}

// NewHolder returns a Holder serving c, which must not be modified afterwards.
func NewHolder(c *Config) *Holder {
	h := &Holder{}
	h.Store(c)
	return h
}

// Reload makes next the running configuration if every change in it can be applied
// live, and returns the changed fields; otherwise it keeps the running one and returns
// Reloadable's error. Reloads racing each other are applied one after the other, each
// checked against the snapshot it replaces. A zero Holder just takes next.
func (h *Holder) Reload(next *Config) (changed []string, err error) {
	for {
		cur := h.Load()
		if cur == nil {
			if h.CompareAndSwap(nil, next) {
				return nil, nil
			}
			continue
		}
		if changed, err = cur.Reloadable(next); err != nil {
			return changed, err
		}
		if h.CompareAndSwap(cur, next) {
			return changed, nil
		}
	}
}

// Applied returns the configuration in force once a reload to next has applied its live
// changes and left the others (Changes marks them) for a restart: next's live fields over
// c's. A later reload compares against it, so a change waiting for a restart is reported
// again until the restart.
func (c *Config) Applied(next *Config) *Config {
	out, n := c.Clone(), next.Clone()
	out.Log.Level = n.Log.Level
	out.MQTT = n.MQTT
	out.Queue.OfflineMessages, out.Queue.OfflineBytes = n.Queue.OfflineMessages, n.Queue.OfflineBytes
	out.Queue.WhenFull, out.Queue.MaxPause = n.Queue.WhenFull, n.Queue.MaxPause
	n.Limits.MaxTLSHandshakes = out.Limits.MaxTLSHandshakes
	out.Limits = n.Limits
	out.Memory.Limit, out.Memory.ReturnToOS = n.Memory.Limit, n.Memory.ReturnToOS
	out.SysInterval = n.SysInterval
	out.HTTP.Admin = n.HTTP.Admin
	clustered := c.Cluster != nil
	if !clustered {
		out.Auth = n.Auth
	}
	out.Listeners = out.Listeners[:0:0]
	old := make(map[string]*Listener, len(c.Listeners))
	for i := range c.Listeners {
		old[c.Listeners[i].Name] = &c.Listeners[i]
	}
	for _, l := range n.Listeners {
		o, ok := old[l.Name]
		switch {
		case !ok && l.Auth != nil: // a new realm: waits for the restart
			continue
		case ok && ((o.Auth == nil) != (l.Auth == nil) || clustered):
			l.Auth = o.Auth.clone()
		}
		delete(old, l.Name)
		out.Listeners = append(out.Listeners, l)
	}
	for _, o := range c.Listeners { // removed, but their realm stays until the restart
		if _, gone := old[o.Name]; gone && o.Auth != nil {
			o.TLS, o.Auth = clonePtr(o.TLS), o.Auth.clone()
			out.Listeners = append(out.Listeners, o)
		}
	}
	return out
}
