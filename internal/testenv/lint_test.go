package testenv

import (
	"bufio"
	"bytes"
	"go/build/constraint"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRaceOnlyThroughTestenv keeps Race the one way code can tell that the race detector
// runs. .ci/run finds the tests that skip under it (allocation counts, memory budgets)
// by the packages that mention testenv.Race, and runs those packages again without
// -race; a race build constraint anywhere else would hide such a test from it.
func TestRaceOnlyThroughTestenv(t *testing.T) {
	root, files := moduleFiles(t)
	for _, path := range files {
		if tagsRace(t, path) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: a race build constraint; ask testenv.Race instead", rel)
		}
	}
}

// TestCIOnlyThroughTestenv keeps CI the one reader of BIFROST_CI, so that "in CI" means
// one thing to every test.
func TestCIOnlyThroughTestenv(t *testing.T) {
	root, files := moduleFiles(t)
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`"BIFROST_CI"`)) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: reads BIFROST_CI; ask testenv.CI instead", rel)
		}
	}
}

// moduleFiles returns the module's root and its Go files outside this package and
// testdata.
func moduleFiles(t *testing.T) (root string, files []string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == here || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("only %d Go files under %s: not the module's root?", len(files), root)
	}
	return root, files
}

// tagsRace reports whether the file's build constraint mentions the race tag.
func tagsRace(t *testing.T, path string) bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "package ") {
			break
		}
		if !constraint.IsGoBuild(line) && !constraint.IsPlusBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if mentions(expr, "race") {
			return true
		}
	}
	return false
}

// mentions reports whether tag appears anywhere in x (Eval would stop at the first
// operand that decides).
func mentions(x constraint.Expr, tag string) bool {
	switch x := x.(type) {
	case *constraint.TagExpr:
		return x.Tag == tag
	case *constraint.NotExpr:
		return mentions(x.X, tag)
	case *constraint.AndExpr:
		return mentions(x.X, tag) || mentions(x.Y, tag)
	case *constraint.OrExpr:
		return mentions(x.X, tag) || mentions(x.Y, tag)
	}
	return false
}
