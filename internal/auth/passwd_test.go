package auth

import (
	"errors"
	"strings"
	"testing"
)

func TestLoadPasswordsErrors(t *testing.T) {
	good, _ := HashPassword([]byte("pw"), 4)
	file := writeTemp(t, "passwd", strings.Join([]string{
		"# users", // 1
		"",        // 2
		"alice:" + good,
		"no colon here",
		"bob:plaintext",
		"alice:" + good,
		"  carol  :  " + good + "  ", // blanks around fields are dropped
		":" + good,
		"dave:" + good + ":extra",
		"eve:$6$c2FsdA==$aGFzaA==",
	}, "\n"))
	_, err := loadPasswords(file)
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		file + ":4: not username:hash",
		file + `:5: user "bob": unknown password hash`,
		file + `:6: user "alice" is also on line 3`,
		file + ":8: empty username",
		file + `:9: user "dave": the hash contains ':'`,
		file + `:10: user "eve": $6$`,
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("errors:\n%v\nwant %d of them", err, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
	var fe *FileError
	if !errors.As(err, &fe) || fe.File != file || fe.Line != 4 {
		t.Errorf("errors.As finds %+v", fe)
	}
	if strings.Contains(err.Error(), good) || strings.Contains(err.Error(), "plaintext") {
		t.Error("an error quotes a password or hash")
	}
}

func TestLoadPasswordsTrimsAndComments(t *testing.T) {
	good, _ := HashPassword([]byte("pw"), 4)
	file := writeTemp(t, "passwd", "# comment\r\n\r\n  carol  :  "+good+"  \r\n#alice:nothing\n")
	p, err := loadPasswords(file)
	if err != nil {
		t.Fatal(err)
	}
	c := p.byName["carol"]
	if len(p.byName) != 1 || !c.verify([]byte("pw")) {
		t.Fatalf("users %v", p.byName)
	}
}

func TestValidUsername(t *testing.T) {
	for _, tc := range []struct {
		user string
		ok   bool
	}{
		{"alice", true},
		{"Ålice Ünïcode", true},
		{"dev/1+2#3", true}, // the ACL refuses these in patterns, the file need not
		{"", false},
		{"a:b", false},
		{"#alice", false},
		{" alice", false},
		{"alice\t", false},
		{"al\nice", false},
		{"al\x00ice", false},
		{"al\x7fice", false},
		{"\xff", false},
	} {
		t.Run(tc.user, func(t *testing.T) {
			if err := ValidUsername(tc.user); (err == nil) != tc.ok {
				t.Fatalf("ValidUsername(%q) = %v", tc.user, err)
			}
		})
	}
}

func TestPasswordFileEdit(t *testing.T) {
	h1, _ := HashPassword([]byte("one"), 4)
	h2, _ := HashPassword([]byte("two"), 4)
	in := "# managed by bifrost passwd\nalice:" + h1 + "\n\n# bob below\nbob:" + h1 + "\n"
	f, err := ParsePasswordFile("pw", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Set("alice", h2); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("carol", h2); err != nil {
		t.Fatal(err)
	}
	if !f.Delete("bob") || f.Delete("bob") {
		t.Error("Delete reports wrongly")
	}
	want := "# managed by bifrost passwd\nalice:" + h2 + "\n\n# bob below\ncarol:" + h2 + "\n"
	if got := string(f.Bytes()); got != want {
		t.Fatalf("edited file:\n%s\nwant\n%s", got, want)
	}
	if err := f.Set("a:b", h2); err == nil {
		t.Error("Set accepted a username with ':'")
	}
	if err := f.Set("dave", "plain"); err == nil {
		t.Error("Set accepted a plain-text password")
	}
	if _, err := ParsePasswordFile("pw", []byte("x:y\nno colon\n")); err == nil || !strings.HasPrefix(err.Error(), "pw:2: not username:hash") {
		t.Errorf("ParsePasswordFile of a bad file: %v", err)
	}
	// A hash New refuses can still be replaced.
	old, err := ParsePasswordFile("pw", []byte("dave:$6$c2FsdA==$aGFzaA==\n"))
	if err != nil {
		t.Fatalf("a $6$ line cannot be edited: %v", err)
	}
	if err := old.Set("dave", h1); err != nil || string(old.Bytes()) != "dave:"+h1+"\n" {
		t.Errorf("replacing a $6$ line: %v\n%s", err, old.Bytes())
	}
}

// loadPasswords reads and decodes the password file at path.
func loadPasswords(path string) (*passwords, error) {
	data, err := readFile("password file", path)
	if err != nil {
		return nil, err
	}
	return parsePasswords(path, data)
}
