package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
)

const passwdUsage = `usage:
  bifrost passwd [-c] [-scram] FILE USER            set USER's password, asked twice
  bifrost passwd -b [-c] [-scram] FILE USER PASSWORD  set it from the command line (batch)
  bifrost passwd -D FILE USER                        delete USER

The file has mosquitto_passwd's format, user:hash per line; Mosquitto 2.0 files ($7$)
are read as they are. The password is asked on the terminal without echo; with standard
input not a terminal, it is read from its first two lines. FILE is replaced atomically and
left readable by its owner only (0600).

flags:
`

// passwd manages a password file as mosquitto_passwd does: it sets a user's password
// (bcrypt, or a SCRAM-SHA-256 record with -scram) or deletes a user, and writes the file
// anew through a temporary file and a rename, so that a broker reloading it never reads
// half a file.
func passwd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("passwd", flag.ContinueOnError)
	flags.SetOutput(stderr)
	create := flags.Bool("c", false, "create the file, overwriting it if it exists")
	batch := flags.Bool("b", false, "take the password from the command line")
	del := flags.Bool("D", false, "delete the user")
	scram := flags.Bool("scram", false, "write a SCRAM-SHA-256 record (for enhanced authentication; it checks plain passwords too)")
	cost := flags.Int("cost", auth.DefaultCost, "bcrypt cost `n` (4..31)")
	iter := flags.Int("iterations", auth.DefaultIterations, "PBKDF2 iterations `n` of a SCRAM record")
	flags.Usage = func() {
		fmt.Fprint(stderr, passwdUsage)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	want := 2
	switch {
	case *del && (*create || *batch || *scram):
		return misuse(stderr, "-D cannot be combined with -c, -b or -scram")
	case *batch:
		want = 3
	}
	if flags.NArg() != want {
		flags.Usage()
		return 2
	}
	file, user := flags.Arg(0), flags.Arg(1)
	if err := auth.ValidUsername(user); err != nil {
		return fail(stderr, "%v", err)
	}

	f := &auth.PasswordFile{}
	if !*create {
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			return fail(stderr, "%s does not exist; -c creates it", file)
		} else if err != nil {
			return fail(stderr, "%v", err)
		}
		if f, err = auth.ParsePasswordFile(file, data); err != nil {
			return fail(stderr, "%v", err)
		}
	}

	if *del {
		if !f.Delete(user) {
			return fail(stderr, "%s: no user %q", file, user)
		}
	} else {
		var pw []byte
		if *batch {
			pw = []byte(flags.Arg(2))
		} else {
			var err error
			if pw, err = askPassword(stdin, stderr); err != nil {
				return fail(stderr, "%v", err)
			}
		}
		var rec string
		var err error
		if *scram {
			rec, err = auth.SCRAMRecord(pw, *iter)
		} else {
			rec, err = auth.HashPassword(pw, *cost)
		}
		clear(pw)
		if err != nil {
			return fail(stderr, "%v", err)
		}
		if err := f.Set(user, rec); err != nil {
			return fail(stderr, "%v", err)
		}
	}
	if err := writeAtomic(file, f.Bytes()); err != nil {
		return fail(stderr, "%v", err)
	}
	return 0
}

func misuse(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "bifrost passwd: %s\n", msg)
	return 2
}

func fail(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "bifrost passwd: "+format+"\n", args...)
	return 1
}

// askPassword asks for the password twice: on the terminal without echo, or, when stdin
// is not a terminal, as its first two lines (for scripts that should not put a password
// on a command line, where ps shows it).
func askPassword(stdin io.Reader, stderr io.Writer) ([]byte, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		read := func(prompt string) ([]byte, error) {
			fmt.Fprint(stderr, prompt)
			pw, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(stderr)
			return pw, err
		}
		pw, err := read("Password: ")
		if err != nil {
			return nil, err
		}
		again, err := read("Reenter password: ")
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(pw, again) {
			return nil, errors.New("the passwords do not match")
		}
		clear(again)
		return pw, nil
	}
	r := bufio.NewReader(stdin)
	line := func() ([]byte, error) {
		s, err := r.ReadString('\n')
		if err != nil && (err != io.EOF || s == "") {
			return nil, errors.New("standard input ended before two password lines")
		}
		return []byte(strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r")), nil
	}
	pw, err := line()
	if err != nil {
		return nil, err
	}
	again, err := line()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(pw, again) {
		return nil, errors.New("the passwords do not match")
	}
	return pw, nil
}

// writeAtomic replaces the file at path with data, mode 0600: it writes a temporary file
// in the same directory, syncs it and renames it over path, then syncs the directory, so
// that a reader (a broker reloading on SIGHUP) sees the old file or the new one, and a
// crash leaves one of them. A symbolic link at path is followed: its target is replaced.
func writeAtomic(path string, data []byte) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename is durable once the directory is; not every system can
		d.Close()
	}
	return nil
}
