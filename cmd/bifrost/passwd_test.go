package main

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

// runPasswd runs the built binary's passwd command with stdin.
func runPasswd(t *testing.T, stdin string, args ...string) (code int, stderr string) {
	t.Helper()
	var errOut bytes.Buffer
	cmd := exec.Command(binary.Path(t), append([]string{"passwd"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stderr = &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), errOut.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, errOut.String()
}

// login checks user/pw against the file through auth.New, as the broker would.
func login(t *testing.T, file, user, pw string) error {
	t.Helper()
	a, err := auth.New(conf.Auth{PasswordFile: file}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("auth.New: %v", err)
	}
	_, err = a.Authenticate(&auth.Request{Username: user, HasUsername: true, Password: []byte(pw), HasPassword: true})
	return err
}

func TestPasswd(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "passwd")
	ok := func(stdin string, args ...string) {
		t.Helper()
		if code, stderr := runPasswd(t, stdin, args...); code != 0 {
			t.Fatalf("bifrost passwd %q: exit %d\n%s", args, code, stderr)
		}
	}
	refused := func(wantCode int, wantMsg, stdin string, args ...string) {
		t.Helper()
		before, _ := os.ReadFile(file)
		code, stderr := runPasswd(t, stdin, args...)
		if code != wantCode || !strings.Contains(stderr, wantMsg) {
			t.Fatalf("bifrost passwd %q: exit %d, stderr %q; want exit %d and %q", args, code, stderr, wantCode, wantMsg)
		}
		if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
			t.Fatal("a refused command changed the file")
		}
	}

	refused(1, "does not exist; -c creates it", "", "-b", file, "alice", "pw")
	ok("", "-c", "-b", file, "alice", "alice-pw")
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	if err := login(t, file, "alice", "alice-pw"); err != nil {
		t.Fatalf("alice: %v", err)
	}

	// A password from standard input, twice, as a SCRAM record.
	ok("bob-pw\nbob-pw\n", "-scram", file, "bob")
	data, _ := os.ReadFile(file)
	if !strings.Contains(string(data), "bob:$scram-sha-256$4096$") || strings.Contains(string(data), "bob-pw") {
		t.Fatalf("file:\n%s", data)
	}
	if err := login(t, file, "bob", "bob-pw"); err != nil {
		t.Fatalf("bob: %v", err)
	}
	if err := login(t, file, "bob", "bob-pW"); err == nil {
		t.Fatal("bob's wrong password logs in")
	}

	refused(1, "the passwords do not match", "one\ntwo\n", file, "carol")
	refused(1, "standard input ended", "one\n", file, "carol")
	refused(1, `contains ':'`, "", "-b", file, "ca:rol", "pw")
	refused(1, `starts with '#'`, "", "-b", file, "#carol", "pw")
	refused(1, "empty password", "", "-b", file, "carol", "")
	refused(1, `no user "carol"`, "", "-D", file, "carol")
	refused(2, "-D cannot be combined", "", "-D", "-b", file, "alice", "x")
	refused(2, "usage:", "", file)

	// Changing a password keeps the other lines, comments included.
	if err := os.WriteFile(file, append([]byte("# our users\n"), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	ok("", "-b", "-cost", "4", file, "alice", "new-pw")
	if err := login(t, file, "alice", "new-pw"); err != nil {
		t.Fatalf("alice's new password: %v", err)
	}
	if err := login(t, file, "alice", "alice-pw"); err == nil {
		t.Fatal("alice's old password still works")
	}
	data, _ = os.ReadFile(file)
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 3 || lines[0] != "# our users" || !strings.HasPrefix(lines[1], "alice:$2a$04$") {
		t.Fatalf("file:\n%s", data)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after a rewrite; want 0600", fi.Mode())
	}

	ok("", "-D", file, "alice")
	if err := login(t, file, "alice", "new-pw"); err == nil {
		t.Fatal("a deleted user logs in")
	}
	// -c starts over.
	ok("", "-c", "-b", "-cost", "4", file, "dave", "d")
	if data, _ := os.ReadFile(file); strings.Count(string(data), "\n") != 1 || !strings.HasPrefix(string(data), "dave:") {
		t.Fatalf("-c did not overwrite:\n%s", data)
	}

	// No temporary file is left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries", len(entries))
	}
}

// TestPasswdMosquittoFile adds a user to a file mosquitto_passwd wrote: both log in.
func TestPasswdMosquittoFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "passwd")
	mosquitto := "pub:$7$101$e6Cki0/G2KPkb8pM$NQJSDW3+E3GVhnH8oPKcif8zUYpi9iw1GiPjEYZ5qMyKjhAEC8QTZpy22m2Ue9BQ1obARlaK9W43OkS1LZtajQ==\n"
	if err := os.WriteFile(file, []byte(mosquitto), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runPasswd(t, "", "-b", "-cost", "4", file, "sub", "sub-pw"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if err := login(t, file, "pub", "secret"); err != nil {
		t.Errorf("the Mosquitto user: %v", err)
	}
	if err := login(t, file, "sub", "sub-pw"); err != nil {
		t.Errorf("the new user: %v", err)
	}
}

// TestPasswdReplacesRefusedHash replaces a Mosquitto 1.x $6$ line, which the broker
// refuses to load, with a new password.
func TestPasswdReplacesRefusedHash(t *testing.T) {
	file := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(file, []byte("dave:$6$c2FsdA==$aGFzaA==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.New(conf.Auth{PasswordFile: file}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a $6$ file loads")
	}
	if code, stderr := runPasswd(t, "", "-b", "-cost", "4", file, "dave", "d"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if err := login(t, file, "dave", "d"); err != nil {
		t.Fatal(err)
	}
}
