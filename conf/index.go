package conf

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// An index records where each field of a parsed file is, by YAML path ("mqtt.max_qos",
// "listeners[1].tls.cert_file"), so that errors can name both the line and the field.
// yaml.v3 reports type errors by line only; the index turns a line back into a field.
type index struct {
	entries []entry          // in document order
	byPath  map[string]entry // the first entry for each path
}

// An entry is one mapping key with its value, or one sequence item (key nil).
type entry struct {
	path  string
	key   *yaml.Node
	value *yaml.Node
}

func (e entry) line() int {
	if e.key != nil {
		return e.key.Line
	}
	return e.value.Line
}

// newIndex indexes the document root; root may be nil (an empty file).
func newIndex(root *yaml.Node) *index {
	idx := &index{byPath: map[string]entry{}}
	if root != nil && root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		idx.entries = append(idx.entries, entry{value: root.Content[0]}) // the file as a whole
		idx.walk("", root.Content[0])
	}
	return idx
}

// walk records the children of n under path. Aliases are not followed: their lines are
// the anchor's, and following them could loop.
func (idx *index) walk(path string, n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			idx.add(entry{path: p, key: k, value: v})
			idx.walk(p, v)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			idx.add(entry{path: p, value: v})
			idx.walk(p, v)
		}
	}
}

func (idx *index) add(e entry) {
	idx.entries = append(idx.entries, e)
	if _, ok := idx.byPath[e.path]; !ok {
		idx.byPath[e.path] = e
	}
}

// line returns the line of path, or of its nearest ancestor present in the file (a
// missing listeners[0].tls is reported at listeners[0]); 0 when none is.
func (idx *index) line(path string) int {
	for path != "" {
		if e, ok := idx.byPath[path]; ok {
			return e.line()
		}
		cut := strings.LastIndexAny(path, ".[")
		if cut < 0 {
			break
		}
		path = path[:cut]
	}
	return 0
}

// The yaml.v3 type errors Parse translates; any other is kept as it is.
var (
	reUnknown   = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	reDuplicate = regexp.MustCompile(`^field (\S+) already set in type \S+$`)
	reDupKey    = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
	reType      = regexp.MustCompile("(?s)^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")
)

// typeError maps one of yaml.v3's TypeError lines ("line 3: field foo not found in type
// conf.MQTT") to an Error naming the field.
func (idx *index) typeError(s string) Error {
	line, msg := splitLine(s)
	if m := reUnknown.FindStringSubmatch(msg); m != nil {
		e := Error{Line: line, Field: idx.keyAt(line, m[1]), Msg: "unknown key"}
		if keys := knownKeys()[m[2]]; len(keys) > 0 {
			e.Msg += "; expected one of " + strings.Join(keys, ", ")
		}
		return e
	}
	if m := reDuplicate.FindStringSubmatch(msg); m != nil {
		return Error{Line: line, Field: idx.keyAt(line, m[1]), Msg: "duplicate key"}
	}
	if m := reDupKey.FindStringSubmatch(msg); m != nil {
		return Error{Line: line, Field: idx.keyAt(line, m[1]), Msg: "duplicate key; first at line " + m[2]}
	}
	if m := reType.FindStringSubmatch(msg); m != nil {
		// yaml.v3 quotes a scalar cut to 7 characters and "..." when it is longer than 10.
		tag, shown, into := m[1], m[2], m[3]
		kind := map[string]yaml.Kind{"!!map": yaml.MappingNode, "!!seq": yaml.SequenceNode}[tag]
		e, ok := idx.valueAt(line, kind, func(v string) bool {
			return v == shown || strings.HasSuffix(shown, "...") && strings.HasPrefix(v, strings.TrimSuffix(shown, "..."))
		})
		if !ok {
			return Error{Line: line, Msg: fmt.Sprintf("expected %s, got %s", want(into), tag)}
		}
		return Error{Line: line, Field: e.path, Msg: fmt.Sprintf("expected %s, got %s", want(into), describe(e.value))}
	}
	// One of our own UnmarshalYAML errors: they quote the scalar they refuse, or end by
	// naming the kind of node they got instead (see describe).
	var kind yaml.Kind
	switch {
	case strings.HasSuffix(msg, "got a list"):
		kind = yaml.SequenceNode
	case strings.HasSuffix(msg, "got a mapping"):
		kind = yaml.MappingNode
	}
	e, _ := idx.valueAt(line, kind, func(v string) bool { return strings.Contains(msg, strconv.Quote(v)) })
	return Error{Line: line, Field: e.path, Msg: msg}
}

// valueAt finds the value of kind (0: a scalar) starting on line, for an error that gives
// only a line. Several values may start on one line in flow style ({a: 1, b: x}): a scalar
// for which match is true wins, else the last candidate, which is the innermost of nested
// ones.
func (idx *index) valueAt(line int, kind yaml.Kind, match func(value string) bool) (entry, bool) {
	if kind == 0 {
		kind = yaml.ScalarNode
	}
	var last entry
	found := false
	for _, e := range idx.entries {
		if e.value.Line != line || e.value.Kind != kind {
			continue
		}
		if kind == yaml.ScalarNode && match(e.value.Value) {
			return e, true
		}
		last, found = e, true
	}
	return last, found
}

// keyAt returns the path of the key named name on line, or name when it is not indexed.
func (idx *index) keyAt(line int, name string) string {
	for _, e := range idx.entries {
		if e.key != nil && e.key.Line == line && e.key.Value == name {
			return e.path
		}
	}
	return name
}

// splitLine splits "line 3: msg" into 3 and msg; a message without a line gives 0.
func splitLine(s string) (int, string) {
	if rest, ok := strings.CutPrefix(s, "line "); ok {
		if num, msg, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				return n, msg
			}
		}
	}
	return 0, s
}

// want names the Go type yaml.v3 could not decode into, in the file's terms.
func want(goType string) string {
	goType = strings.TrimLeft(goType, "*")
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "conf."):
		return "a mapping of keys"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	}
	return goType
}

// knownKeys maps each struct type of the schema, named as yaml.v3 names it ("conf.MQTT"),
// to its YAML keys, to list them after an unknown key.
func knownKeys() map[string][]string {
	keys := map[string][]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || keys[t.String()] != nil {
			return
		}
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue // not a key of the file
			}
			keys[t.String()] = append(keys[t.String()], name)
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[Config]())
	return keys
}
