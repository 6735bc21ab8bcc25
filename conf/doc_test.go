package conf

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestFieldsDocumented keeps the package readable with go doc: every exported type and
// every exported field of an exported struct has a doc comment above it, never a line
// comment beside it (go doc shows both; one place keeps a struct consistent). A field
// with a YAML key names its path in parentheses, e.g. (listeners[i].tls.cert_file), as
// the schema reaches it from Config.
func TestFieldsDocumented(t *testing.T) {
	paths := yamlPaths()
	fset := token.NewFileSet()
	names, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if !ts.Name.IsExported() {
					continue
				}
				doc := ts.Doc
				if doc == nil && gd.Lparen == token.NoPos {
					doc = gd.Doc
				}
				if doc == nil {
					t.Errorf("%s: type %s has no doc comment", fset.Position(ts.Pos()), ts.Name.Name)
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					checkFields(t, fset, ts.Name.Name, st, paths[ts.Name.Name])
				}
			}
		}
	}
}

// checkFields checks the exported fields of struct typ, whose YAML paths (from Config)
// are prefixes.
func checkFields(t *testing.T, fset *token.FileSet, typ string, st *ast.StructType, prefixes []string) {
	t.Helper()
	for _, fl := range st.Fields.List {
		names := make([]string, 0, len(fl.Names))
		for _, n := range fl.Names {
			names = append(names, n.Name)
		}
		if len(names) == 0 { // embedded: the field is named for its type
			names = append(names, embeddedName(fl.Type))
		}
		if !ast.IsExported(names[0]) {
			continue
		}
		at := fset.Position(fl.Pos())
		field := typ + "." + strings.Join(names, ", ")
		if len(names) > 1 {
			t.Errorf("%s: %s share one declaration: give each its own doc comment", at, field)
		}
		if fl.Comment != nil {
			t.Errorf("%s: %s has a line comment: move it above the field as its doc comment", at, field)
		}
		if fl.Doc == nil {
			t.Errorf("%s: %s has no doc comment", at, field)
			continue
		}
		key := yamlKey(fl.Tag)
		if key == "" || key == "-" || len(prefixes) == 0 {
			continue
		}
		var want, quoted []string
		for _, p := range prefixes {
			if p != "" {
				p += "."
			}
			want = append(want, p+key)
			quoted = append(quoted, regexp.QuoteMeta(p+key))
		}
		re := regexp.MustCompile(`\((?:` + strings.Join(quoted, "|") + `)[);,]`)
		if !re.MatchString(fl.Doc.Text()) {
			t.Errorf("%s: %s's doc does not name its YAML key in parentheses, as (%s)", at, field, strings.Join(want, ") or ("))
		}
	}
}

// yamlPaths maps each struct type of the schema to the YAML paths it is found at from
// Config, with [i] for a list's item: Auth at "auth" and "listeners[i].auth".
func yamlPaths() map[string][]string {
	paths := map[string][]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() == reflect.Slice {
			walk(t.Elem(), path+"[i]")
			return
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Config]().PkgPath() {
			return
		}
		paths[t.Name()] = append(paths[t.Name()], path)
		for f := range t.Fields() {
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" {
				continue
			}
			p := key
			if path != "" {
				p = path + "." + key
			}
			walk(f.Type, p)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	// A list's item inside a list is the j-th: bridges[i].topics[j].
	for typ, ps := range paths {
		for i, p := range ps {
			if strings.Count(p, "[i]") == 2 {
				first := strings.Index(p, "[i]") + len("[i]")
				ps[i] = p[:first] + strings.Replace(p[first:], "[i]", "[j]", 1)
			}
		}
		paths[typ] = ps
	}
	return paths
}

// yamlKey returns the name in a field's yaml tag; "" without one.
func yamlKey(tag *ast.BasicLit) string {
	if tag == nil {
		return ""
	}
	key, _, _ := strings.Cut(reflect.StructTag(strings.Trim(tag.Value, "`")).Get("yaml"), ",")
	return key
}

// embeddedName is the field name of an embedded type: atomic.Pointer[Config] is Pointer.
func embeddedName(x ast.Expr) string {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.SelectorExpr:
			return e.Sel.Name
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}
