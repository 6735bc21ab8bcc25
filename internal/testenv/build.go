package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// A Binary is a command of this module built once per test binary, for tests that run it
// as a separate process (the broker under kill -9, the load tool's worker processes, a
// cluster's nodes).
type Binary struct {
	Pkg   string   // the main package: an import path, or a directory such as "."
	Flags []string // more go build flags: -tags, -ldflags

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the binary on its first call and returns its path. A missing go command
// skips the test (fails it in CI); a failed build fails it.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	gocmd := Command(t, "go", "the Go toolchain, to build the binary under test")
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "bifrost-test-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, filepath.Base(b.Pkg))
		if b.Pkg == "." {
			b.path = filepath.Join(b.dir, "cmd")
		}
		args := append([]string{"build", "-o", b.path}, b.Flags...)
		out, err := exec.Command(gocmd, append(args, b.Pkg)...).CombinedOutput()
		if err != nil {
			b.err = errors.New("go build " + b.Pkg + ": " + err.Error() + "\n" + string(out))
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes what Path built; TestMain calls it once the tests have run.
func (b *Binary) Cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// Run runs path with args to completion and returns its exit code and output; an error
// other than a non-zero exit fails t.
func Run(t testing.TB, path string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}
