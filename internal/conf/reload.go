package conf

import (
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
)

// liveFields are the YAML paths, or path prefixes ending in "." , that a running broker
// applies without a restart. Every other field needs one: it is bound into a socket
// (listeners, http), an open engine (store) or the shape of memory (memory.profile). A
// new field needs a restart until it is listed here, which is the safe way to be wrong.
var liveFields = []string{
	"log.",                // the logger's level and handler are swapped atomically
	"mqtt.",               // limits apply to connections from the next CONNECT on
	"queue.",              // bounds apply to each queue from its next enqueue
	"auth.",               // the password and ACL files are re-read
	"memory.limit",        // debug.SetMemoryLimit may be called at any time
	"memory.return_to_os", // the memory policy's ticker is reset
	"sys_interval",        // the $SYS ticker is reset
}

// Reloadable compares c, the running configuration, with next, both as Parse returns
// them, and lists the changed fields that can be applied live, as YAML paths. When a
// changed field needs a restart, err is an *Errors naming each such field and next should
// not be applied at all; changed still lists the live changes.
func (c *Config) Reloadable(next *Config) (changed []string, err error) {
	var restart errorList
	for _, path := range diff("", reflect.ValueOf(c).Elem(), reflect.ValueOf(next).Elem(), nil) {
		if isLive(path) {
			changed = append(changed, path)
		} else {
			restart.add(path, "changed; takes effect only after a restart")
		}
	}
	return changed, restart.err()
}

func isLive(path string) bool {
	// A listener's auth block is as live as the top-level one; adding or removing the
	// block (the path listeners[i].auth itself) needs a restart.
	if rest, ok := strings.CutPrefix(path, "listeners["); ok {
		if _, field, ok := strings.Cut(rest, "]."); ok && strings.HasPrefix(field, "auth.") {
			return true
		}
	}
	for _, f := range liveFields {
		if path == f || (strings.HasSuffix(f, ".") && strings.HasPrefix(path, f)) {
			return true
		}
	}
	return false
}

// diff appends to out the YAML paths of the fields where a and b differ, down to single
// values, except that lists of different lengths differ as a whole.
func diff(path string, a, b reflect.Value, out []string) []string {
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
				out = append(out, path)
			}
			return out
		}
		out = diff(path, a.Elem(), b.Elem(), out)
	case reflect.Slice:
		if a.Len() != b.Len() {
			return append(out, path)
		}
		for i := range a.Len() {
			out = diff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), out)
		}
	default:
		if !a.Equal(b) {
			out = append(out, path)
		}
	}
	return out
}

// A Holder holds the running configuration as an immutable snapshot, swapped atomically
// on reload (as nats-server does in server.go). Readers Load the snapshot once per
// operation and never modify it; a writer builds the next one (Parse, or Clone and
// change), then Reload or Swap. The zero Holder holds nil.
type Holder struct {
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
